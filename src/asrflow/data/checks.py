"""The validation checks: each a named function that returns :class:`Issue` records naming the
manifest line, the item and what to do (:mod:`asrflow.data.validate` runs them all).

Checks (``code`` in the report):

errors
    ``empty_split``          a split has no utterances.
    ``lhotse_invalid``       Lhotse's structural checks on the cut failed.
    ``audio_unreadable``     the audio file is missing or its header (or, with
                             ``full_decode``, its samples) cannot be read, or (with
                             ``full_decode``) it holds NaN or infinite samples.
    ``audio_truncated``      a WAV header declares more frames than the file holds (an
                             interrupted copy), whatever the manifest's duration says.
    ``audio_empty``          the file holds no samples (a header only).
    ``sampling_rate``        the header's sampling rate differs from the corpus's declared
                             ``sampling_rate`` (or, for Kaldi, from the rate it was read at).
    ``empty_text``           the transcript is empty or whitespace only.
    ``duration_mismatch``    a whole-file utterance's declared duration differs from the audio's
                             by more than ``duration_tolerance`` seconds.
    ``segment_outside``      offset + duration lies beyond the end of the audio.
    ``duplicate_id``         the utterance ID occurs twice (in one split or across splits).
    ``audio_in_two_splits``  the same audio file is used by two splits.
    ``group_in_two_splits``  a speaker/session (``group_fields``) occurs in two splits and the
                             field is not listed in ``allow_group_overlap``.
warnings
    ``mixed_sampling_rates`` no ``sampling_rate`` is declared and the audio has several rates
                             (each file is resampled to the model's rate when loaded).
    ``mixed_case``           some transcripts are upper case, others lower case.
    ``digits_and_words``     numbers are written as digits in some transcripts and as words in
                             others.
    ``unseen_characters``    characters in dev/test that never occur in train.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lhotse.cut import Cut
from lhotse.qa import validate as lhotse_validate

from asrflow.data.audio import AudioInfo
from asrflow.data.cuts import SEGMENT, field, origin, text
from asrflow.text import TextNormalization, normalize
from asrflow.types import Seconds

log = logging.getLogger(__name__)

Splits = Mapping[str, Sequence[Cut]]

TRAIN = "train"
NUMBER_WORDS = frozenset(
    [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
        "thirty",
        "forty",
        "fifty",
        "sixty",
        "seventy",
        "eighty",
        "ninety",
        "hundred",
        "thousand",
        "million",
    ]
)
EXAMPLES = 5


@dataclass(frozen=True)
class ValidationConfig:
    """Settings of the validation rule (``corpora.<name>.validation`` in the config)."""

    duration_tolerance: Seconds = 0.05
    full_decode: bool = False
    group_fields: tuple[str, ...] = ("speaker", "session")
    allow_group_overlap: tuple[str, ...] = ()
    threads: int = 16

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ValidationConfig:
        d = dict(d)
        for key in ("group_fields", "allow_group_overlap"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass(frozen=True)
class Issue:
    """One finding: ``where`` is ``"<manifest>:<line>"`` (or a split name for split-wide ones)."""

    severity: str  # "error" | "warning"
    code: str
    split: str
    where: str
    item: str
    message: str
    hint: str

    def format(self) -> str:
        return f"{self.where} [{self.split}] {self.item}: {self.message} -> {self.hint}"


def _issue(severity: str, code: str, split: str, cut: Cut, message: str, hint: str) -> Issue:
    return Issue(severity, code, split, origin(cut), f"utterance {cut.id}", message, hint)


def audio_path(cut: Cut) -> str:
    return str(cut.recording.sources[0].source)


class NonFiniteAudio(ValueError):
    """Decoded audio holds NaN or infinite samples (a float WAV written from a broken model)."""


def check_split_sizes(splits: Splits, **_: Any) -> Iterable[Issue]:
    """No split is empty (an empty train split would only fail later, in the tokenizer)."""
    for split, cuts in splits.items():
        if not cuts:
            yield Issue(
                "error",
                "empty_split",
                split,
                split,
                f"split {split}",
                f"split {split!r} has 0 utterances",
                "give it a manifest with utterances (is the file empty, or every line blank?), "
                "or remove the split from the corpus in the config",
            )


def _bad_audio(info: AudioInfo | Exception) -> bool:
    """Unreadable, truncated or empty audio: :func:`check_audio` names the file as the fault."""
    return isinstance(info, Exception) or info.header_samples is not None or not info.num_samples


def check_lhotse(
    splits: Splits, infos: Mapping[str, AudioInfo | Exception], **_: Any
) -> Iterable[Issue]:
    """Lhotse's structural per-cut checks (positive duration, supervision bounds, ...)."""
    for split, cuts in splits.items():
        for cut in cuts:
            if _bad_audio(infos[audio_path(cut)]):
                continue
            try:
                lhotse_validate(cut)
            except AssertionError as exc:
                yield _issue(
                    "error",
                    "lhotse_invalid",
                    split,
                    cut,
                    str(exc),
                    "fix the manifest line (duration, offset or IDs)",
                )


def check_audio(
    splits: Splits,
    infos: Mapping[str, AudioInfo | Exception],
    config: ValidationConfig,
    corpus: str = "<corpus>",
    sampling_rate: int | None = None,
    **_: Any,
) -> Iterable[Issue]:
    """Audio opens, is whole and not empty, has the declared sampling rate (``sampling_rate``,
    else the rate the manifest gives), lasts as long as declared, and a segment lies inside."""
    tol = config.duration_tolerance
    for split, cuts in splits.items():
        for cut in cuts:
            path = audio_path(cut)
            info = infos[path]
            if isinstance(info, Exception):
                if isinstance(info, NonFiniteAudio):
                    what = str(info)
                elif not Path(path).exists():
                    what = "does not exist"
                else:
                    what = f"cannot be read: {info}"
                yield _issue(
                    "error",
                    "audio_unreadable",
                    split,
                    cut,
                    f"audio {path} {what}",
                    "fix the path or the file, or remove the line",
                )
                continue
            if info.header_samples is not None:
                yield _issue(
                    "error",
                    "audio_truncated",
                    split,
                    cut,
                    f"audio {path} is truncated: its header says {info.header_samples} frames, "
                    f"the file holds {info.num_samples}",
                    "the file is damaged (an interrupted copy or download?), not the manifest "
                    "line: copy it again from its source, or remove the line",
                )
                continue
            if not info.num_samples:
                yield _issue(
                    "error",
                    "audio_empty",
                    split,
                    cut,
                    f"audio {path} holds no samples (a header only)",
                    "the file is damaged or was never written, not the manifest line: replace "
                    "it from its source, or remove the line",
                )
                continue
            expected = sampling_rate or cut.sampling_rate
            if info.sampling_rate != expected:
                if sampling_rate:
                    said = f"corpora.{corpus}.sampling_rate declares {sampling_rate} Hz"
                    hint = (
                        f"resample the file to {sampling_rate} Hz (e.g. `sox in.wav -r "
                        f"{sampling_rate} out.wav`), or remove sampling_rate from corpora."
                        f"{corpus} to accept several rates (each file is resampled to the "
                        "model's rate when loaded)"
                    )
                else:
                    said = f"the manifest reads it as {cut.sampling_rate} Hz"
                    hint = (
                        f"declare corpora.{corpus}.sampling_rate: {info.sampling_rate} if that "
                        "is the corpus's rate (a Kaldi data dir is read at the declared rate, "
                        f"16000 Hz when none is), or resample the file to {cut.sampling_rate} Hz"
                    )
                yield _issue(
                    "error",
                    "sampling_rate",
                    split,
                    cut,
                    f"audio {path} is {info.sampling_rate} Hz but {said}",
                    hint,
                )
            actual = info.duration
            if not field(cut, SEGMENT):
                if abs(cut.duration - actual) > tol:
                    yield _issue(
                        "error",
                        "duration_mismatch",
                        split,
                        cut,
                        f"declared duration {cut.duration:.3f} s but the audio lasts "
                        f"{actual:.3f} s (tolerance {tol} s)",
                        "correct the duration (or give an offset for a segment)",
                    )
            elif cut.start + cut.duration > actual + tol:
                yield _issue(
                    "error",
                    "segment_outside",
                    split,
                    cut,
                    f"offset {cut.start:.3f} s + duration {cut.duration:.3f} s = "
                    f"{cut.start + cut.duration:.3f} s lies beyond the end of the audio "
                    f"({actual:.3f} s)",
                    "correct offset/duration or the audio path",
                )


def check_sampling_rates(
    splits: Splits,
    infos: Mapping[str, AudioInfo | Exception],
    corpus: str = "<corpus>",
    sampling_rate: int | None = None,
    model_rates: Mapping[str, int] | None = None,
    **_: Any,
) -> Iterable[Issue]:
    """Without a declared ``sampling_rate``, audio at several rates is a warning with counts."""
    if sampling_rate:
        return
    by_rate: dict[int, list[Cut]] = defaultdict(list)
    for cuts in splits.values():
        for cut in cuts:
            info = infos[audio_path(cut)]
            if not isinstance(info, Exception):
                by_rate[info.sampling_rate].append(cut)
    if len(by_rate) > 1:
        counts = "; ".join(
            f"{rate} Hz: {len(cuts)} (e.g. {_examples(cuts)})"
            for rate, cuts in sorted(by_rate.items())
        )
        yield _convention_issue(
            "mixed_sampling_rates",
            "all",
            f"the audio has {len(by_rate)} sampling rates: {counts}",
            f"{resampling_note(model_rates)}; if one rate is expected, declare corpora."
            f"{corpus}.sampling_rate so that any other is an error",
        )


def resampling_note(model_rates: Mapping[str, int] | None) -> str:
    """What happens to audio at another rate than the model's, for the report."""
    rates = sorted(set((model_rates or {}).values()))
    if not rates:
        return "each file is resampled to the rate of the model's frontend when loaded"
    runs = ", ".join(f"{run}: {rate} Hz" for run, rate in sorted((model_rates or {}).items()))
    return f"each file is resampled when loaded to the rate the model's frontend expects ({runs})"


def check_text(splits: Splits, **_: Any) -> Iterable[Issue]:
    """No empty or whitespace-only transcript."""
    for split, cuts in splits.items():
        for cut in cuts:
            if not text(cut).strip():
                yield _issue(
                    "error",
                    "empty_text",
                    split,
                    cut,
                    "empty transcript",
                    "write the transcript or remove the line",
                )


def check_unique_ids(splits: Splits, **_: Any) -> Iterable[Issue]:
    """Every utterance ID is unique over all splits."""
    seen: dict[str, tuple[str, str]] = {}
    for split, cuts in splits.items():
        for cut in cuts:
            if cut.id in seen:
                first_split, first_where = seen[cut.id]
                yield _issue(
                    "error",
                    "duplicate_id",
                    split,
                    cut,
                    f"ID already used at {first_where} [{first_split}]",
                    "give every utterance a unique ID (utt_id) or remove the duplicate",
                )
            else:
                seen[cut.id] = (split, origin(cut))


def _path_resolver() -> Callable[[str], str]:
    """``path -> str(Path(path).resolve())``, resolving each directory only once.

    ``realpath`` resolves a path component by component, so ``dir/name`` resolves to
    ``resolve(dir)/name`` unless that is a symlink. Following that with the directory memoized
    gives the same string for one ``lstat`` per file instead of one per path component; symlinks
    (and the names ``..``, ``.``, ``""``) go through :meth:`Path.resolve` as a whole.
    """
    dirs: dict[str, str] = {}

    def resolve(path: str) -> str:
        head, tail = os.path.split(path)
        if os.sep != "/" or tail in ("", ".", ".."):
            return str(Path(path).resolve())
        where = dirs.get(head)
        if where is None:
            try:
                where = dirs[head] = str(Path(head).resolve())
            except RuntimeError:  # a symlink loop: fail exactly as the whole path does
                return str(Path(path).resolve())
        joined = where + tail if where.endswith("/") else f"{where}/{tail}"
        return str(Path(path).resolve()) if os.path.islink(joined) else joined

    return resolve


def check_audio_leakage(splits: Splits, **_: Any) -> Iterable[Issue]:
    """No audio file is used by two splits."""
    owner: dict[str, tuple[str, str]] = {}
    resolve = _path_resolver()
    for split, cuts in splits.items():
        for cut in cuts:
            path = resolve(audio_path(cut))
            first = owner.setdefault(path, (split, origin(cut)))
            if first[0] != split:
                yield _issue(
                    "error",
                    "audio_in_two_splits",
                    split,
                    cut,
                    f"audio {path} is also used in split {first[0]} ({first[1]})",
                    "keep each recording in one split only",
                )


def check_group_leakage(splits: Splits, config: ValidationConfig, **_: Any) -> Iterable[Issue]:
    """No speaker/session (``group_fields``) spans two splits unless explicitly allowed."""
    for name in config.group_fields:
        if name in config.allow_group_overlap:
            continue
        where: dict[str, dict[str, list[Cut]]] = defaultdict(lambda: defaultdict(list))
        for split, cuts in splits.items():
            for cut in cuts:
                value = field(cut, name)
                if value not in (None, ""):
                    where[str(value)][split].append(cut)
        for value, by_split in sorted(where.items()):
            if len(by_split) > 1:
                # point at the split holding the fewest of its utterances: the likely stray line
                stray = min(sorted(by_split), key=lambda s: len(by_split[s]))
                places = "; ".join(
                    f"{s}: {len(cs)} utterance(s), e.g. {origin(cs[0])}"
                    for s, cs in sorted(by_split.items())
                )
                yield Issue(
                    "error",
                    "group_in_two_splits",
                    stray,
                    origin(by_split[stray][0]),
                    f"{name} {value}",
                    f"{name} {value!r} occurs in splits {', '.join(sorted(by_split))} ({places})",
                    f"move all of this {name}'s utterances into one split, or list "
                    f"{name!r} in validation.allow_group_overlap if that is intended",
                )


def _convention_issue(code: str, split: str, message: str, hint: str) -> Issue:
    return Issue("warning", code, split, split, "transcripts", message, hint)


_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[a-z]+")


def _examples(cuts: Sequence[Cut]) -> str:
    return ", ".join(origin(c) for c in cuts[:EXAMPLES])


def check_conventions(
    splits: Splits, normalization: TextNormalization, **_: Any
) -> Iterable[Issue]:
    """Transcript-convention warnings: mixed case, digits vs number words, unseen characters."""
    # the cuts themselves are collected; only the few named as examples need their origin
    upper: list[Cut] = []
    lower: list[Cut] = []
    digits: list[Cut] = []
    words: list[Cut] = []
    for cuts in splits.values():
        for cut in cuts:
            t = text(cut)
            letters = [ch for ch in t if ch.isalpha()]
            if len(letters) >= 2 and all(ch.isupper() for ch in letters):
                upper.append(cut)
            elif any(ch.islower() for ch in letters):
                lower.append(cut)
            if _DIGIT.search(t):
                digits.append(cut)
            if NUMBER_WORDS.intersection(_WORD.findall(t.lower())):
                words.append(cut)
    if upper and lower:
        yield _convention_issue(
            "mixed_case",
            "all",
            f"{len(upper)} transcript(s) are all upper case (e.g. {_examples(upper)}) "
            f"and {len(lower)} are not",
            "use one casing convention (scoring ignores case, but "
            "an unnormalized model learns two spellings)",
        )
    if digits and words:
        yield _convention_issue(
            "digits_and_words",
            "all",
            f"{len(digits)} transcript(s) write numbers as digits (e.g. "
            f"{_examples(digits)}) and {len(words)} as words",
            "write numbers one way (usually words) in every split",
        )
    if TRAIN not in splits:
        return
    train_texts = {text(c) for c in splits[TRAIN]}
    train_chars = {ch for t in train_texts for ch in normalize(t, normalization)}
    for split, cuts in splits.items():
        if split == TRAIN:
            continue
        unseen: dict[str, list[str]] = defaultdict(list)
        for cut in cuts:
            for ch in set(normalize(text(cut), normalization)) - train_chars:
                unseen[ch].append(origin(cut))
        if unseen:
            chars = " ".join(repr(ch) for ch in sorted(unseen))
            example = next(iter(unseen.values()))[:EXAMPLES]
            yield _convention_issue(
                "unseen_characters",
                split,
                f"characters {chars} occur in {split} but never in train (e.g. "
                f"{', '.join(example)})",
                "the model cannot emit them; normalize them away or "
                "add training data that has them",
            )


CHECKS: tuple[Callable[..., Iterable[Issue]], ...] = (
    check_split_sizes,
    check_lhotse,
    check_audio,
    check_sampling_rates,
    check_text,
    check_unique_ids,
    check_audio_leakage,
    check_group_leakage,
    check_conventions,
)
