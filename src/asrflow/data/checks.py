"""The validation checks: each a named function that returns :class:`~asrflow.data.issues.Issue`
records naming the manifest line, the item and what to do (:mod:`asrflow.data.validate` runs them
all, :data:`CHECKS`). Those that use the audio headers are in :mod:`asrflow.data.audio_checks`.

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
    ``audio_two_ids``        the same audio (a file, or one stretch of it) is two utterances of
                             one split with different transcripts: one of them is wrong.
    ``group_in_two_splits``  a speaker/session (``group_fields``) occurs in two splits and the
                             field is not listed in ``allow_group_overlap``.
warnings
    ``mixed_sampling_rates`` no ``sampling_rate`` is declared and the audio has several rates
                             (each file is resampled to the model's rate when loaded).
    ``mixed_case``           some transcripts are upper case, others lower case.
    ``digits_and_words``     numbers are written as digits in some transcripts and as words in
                             others.
    ``unseen_characters``    characters in dev/test that never occur in train.
    ``dev_seen_groups``      every speaker (or session) of dev is also in train, while a test
                             split has some train lacks: dev measures seen speakers only
                             (:mod:`asrflow.data.dev_groups`; fields of ``allow_group_overlap``).
    ``audio_repeated``       the same audio is two utterances of one split with the same
                             transcript (a repeated line: it trains twice).
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lhotse.cut import Cut

from asrflow.data.audio_checks import check_audio, check_lhotse, check_sampling_rates
from asrflow.data.cuts import field, origin, text
from asrflow.data.dev_groups import CODE as DEV_SEEN_GROUPS
from asrflow.data.dev_groups import DevGroupFinding, corpus_finding
from asrflow.data.issues import (
    EXAMPLES,
    Issue,
    Splits,
    ValidationConfig,
    audio_path,
    convention_issue,
    examples_text,
    make_issue,
)
from asrflow.text import TextNormalization, normalize

log = logging.getLogger(__name__)

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


def check_split_sizes(
    splits: Splits, manifests: Mapping[str, str] | None = None, **_: Any
) -> Iterable[Issue]:
    """No split is empty (an empty train split would only fail later, in the tokenizer); the
    issue is placed at the split's manifest when ``manifests`` (split -> manifest) has it."""
    for split, cuts in splits.items():
        if not cuts:
            manifest = (manifests or {}).get(split)
            yield Issue(
                "error",
                "empty_split",
                split,
                manifest or split,
                f"split {split}",
                f"split {split!r} has 0 utterances",
                f"give it a manifest with utterances (is {manifest or 'the file'} empty, or every "
                "line blank?), or remove the split from the corpus in the config",
            )


def check_text(splits: Splits, **_: Any) -> Iterable[Issue]:
    """No empty or whitespace-only transcript."""
    for split, cuts in splits.items():
        for cut in cuts:
            if not text(cut).strip():
                yield make_issue(
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
                yield make_issue(
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
                yield make_issue(
                    "error",
                    "audio_in_two_splits",
                    split,
                    cut,
                    f"audio {path} is also used in split {first[0]} ({first[1]})",
                    "keep each recording in one split only",
                )


def check_audio_reuse(
    splits: Splits, normalization: TextNormalization, **_: Any
) -> Iterable[Issue]:
    """No audio (a whole file, or the same stretch of one) is two utterances of one split: with
    another transcript that is an error (one of the two is wrong), with the same a warning."""
    resolve = _path_resolver()
    for split, cuts in splits.items():
        first: dict[tuple[str, float, float], Cut] = {}
        for cut in cuts:
            path = resolve(audio_path(cut))
            other = first.setdefault((path, round(cut.start, 3), round(cut.duration, 3)), cut)
            if other is cut:
                continue
            audio = (
                f"audio {path} ({cut.start:.3f}-{cut.start + cut.duration:.3f} s) is also "
                f"utterance {other.id} ({origin(other)})"
            )
            if normalize(text(cut), normalization) == normalize(text(other), normalization):
                yield make_issue(
                    "warning",
                    "audio_repeated",
                    split,
                    cut,
                    f"{audio}, with the same transcript",
                    "a repeated line trains on the same utterance twice: remove one of them",
                )
            else:
                yield make_issue(
                    "error",
                    "audio_two_ids",
                    split,
                    cut,
                    f"{audio}, with another transcript ({text(cut)!r} here, {text(other)!r} there)",
                    "one audio has one transcript: fix the line whose audio path or transcript "
                    "is wrong, or remove it",
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


def group_values(splits: Splits, fields: Iterable[str]) -> dict[str, dict[str, list[str]]]:
    """Split -> group field -> its sorted values (the report's ``groups``; a cut without the
    field adds none)."""
    out: dict[str, dict[str, list[str]]] = {}
    for split, cuts in splits.items():
        out[split] = {}
        for name in fields:
            values = {field(cut, name) for cut in cuts} - {None, ""}
            out[split][name] = sorted(str(v) for v in values)
    return out


def dev_finding(
    groups: Mapping[str, Mapping[str, list[str]]], config: ValidationConfig, corpus: str | None
) -> DevGroupFinding | None:
    """Whether dev shares every speaker (or session) with train while a test split has new ones
    (:func:`asrflow.data.dev_groups.corpus_finding`), for the fields of ``allow_group_overlap``
    only: for the others any shared value is already an error."""
    allowed = [f for f in config.group_fields if f in config.allow_group_overlap]
    return corpus_finding(groups, allowed, corpus) if allowed else None


def check_dev_groups(
    splits: Splits,
    config: ValidationConfig,
    corpus: str | None = None,
    groups: Mapping[str, Mapping[str, list[str]]] | None = None,
    **_: Any,
) -> Iterable[Issue]:
    """A warning (the user may mean it) when dev measures seen speakers only (:func:`dev_finding`;
    ``groups``: :func:`group_values` of ``splits``, computed here when not given)."""
    if groups is None:
        groups = group_values(splits, config.group_fields)
    finding = dev_finding(groups, config, corpus)
    if finding is not None:
        yield Issue(
            "warning",
            DEV_SEEN_GROUPS,
            finding.dev,
            finding.dev,
            finding.what,
            finding.message,
            finding.hint,
        )


_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[a-z]+")


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
        yield convention_issue(
            "mixed_case",
            "all",
            f"{len(upper)} transcript(s) are all upper case (e.g. {examples_text(upper)}) "
            f"and {len(lower)} are not",
            "use one casing convention (scoring ignores case, but "
            "an unnormalized model learns two spellings)",
        )
    if digits and words:
        yield convention_issue(
            "digits_and_words",
            "all",
            f"{len(digits)} transcript(s) write numbers as digits (e.g. "
            f"{examples_text(digits)}) and {len(words)} as words",
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
            yield convention_issue(
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
    check_audio_reuse,
    check_group_leakage,
    check_dev_groups,
    check_conventions,
)
