"""The validation checks that use the audio headers read for every file (``infos``): whether the
audio opens, is whole and not empty, has the declared sampling rate and lasts as long as the
manifest says (codes ``audio_unreadable``, ``audio_truncated``, ``audio_empty``,
``sampling_rate``, ``duration_mismatch``, ``segment_outside``, ``mixed_sampling_rates``), and
Lhotse's per-cut checks (``lhotse_invalid``) on the cuts whose audio is sound.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from lhotse.cut import Cut
from lhotse.qa import validate as lhotse_validate

from asrflow.data.audio import AudioInfo, unreadable
from asrflow.data.cuts import SEGMENT, field
from asrflow.data.issues import (
    Issue,
    Splits,
    ValidationConfig,
    audio_path,
    convention_issue,
    examples_text,
    make_issue,
)


class NonFiniteAudio(ValueError):
    """Decoded audio holds NaN or infinite samples (a float WAV written from a broken model)."""


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
                yield make_issue(
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
            if _bad_audio(info):
                yield _bad_audio_issue(split, cut, path, info)
                continue
            if info.sampling_rate != (sampling_rate or cut.sampling_rate):
                yield _sampling_rate_issue(split, cut, path, info, corpus, sampling_rate)
            extent = _extent_issue(split, cut, info.duration, tol)
            if extent is not None:
                yield extent


def _bad_audio_issue(split: str, cut: Cut, path: str, info: AudioInfo | Exception) -> Issue:
    """The error for audio that :func:`_bad_audio` finds unreadable, truncated or empty."""
    if isinstance(info, Exception):
        if isinstance(info, NonFiniteAudio):
            what = str(info)
        else:
            what = unreadable(path, info, "cannot be read")
        return make_issue(
            "error",
            "audio_unreadable",
            split,
            cut,
            f"audio {path} {what}",
            "fix the path or the file, or remove the line",
        )
    if info.header_samples is not None:
        return make_issue(
            "error",
            "audio_truncated",
            split,
            cut,
            f"audio {path} is truncated: its header says {info.header_samples} frames, "
            f"the file holds {info.num_samples}",
            "the file is damaged (an interrupted copy or download?), not the manifest "
            "line: copy it again from its source, or remove the line",
        )
    return make_issue(
        "error",
        "audio_empty",
        split,
        cut,
        f"audio {path} holds no samples (a header only)",
        "the file is damaged or was never written, not the manifest line: replace "
        "it from its source, or remove the line",
    )


def _sampling_rate_issue(
    split: str, cut: Cut, path: str, info: AudioInfo, corpus: str, sampling_rate: int | None
) -> Issue:
    """The audio's rate differs from the declared ``sampling_rate``, else from the manifest's."""
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
    return make_issue(
        "error",
        "sampling_rate",
        split,
        cut,
        f"audio {path} is {info.sampling_rate} Hz but {said}",
        hint,
    )


def _extent_issue(split: str, cut: Cut, actual: float, tol: float) -> Issue | None:
    """A whole file's declared duration differs from the audio's ``actual`` one, or a segment
    ends beyond it (more than ``tol`` seconds either way)."""
    if not field(cut, SEGMENT):
        if abs(cut.duration - actual) > tol:
            return make_issue(
                "error",
                "duration_mismatch",
                split,
                cut,
                f"declared duration {cut.duration:.3f} s but the audio lasts "
                f"{actual:.3f} s (tolerance {tol} s)",
                "correct the duration (or give an offset for a segment)",
            )
        return None
    if cut.start + cut.duration > actual + tol:
        return make_issue(
            "error",
            "segment_outside",
            split,
            cut,
            f"offset {cut.start:.3f} s + duration {cut.duration:.3f} s = "
            f"{cut.start + cut.duration:.3f} s lies beyond the end of the audio "
            f"({actual:.3f} s)",
            "correct offset/duration or the audio path",
        )
    return None


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
            f"{rate} Hz: {len(cuts)} (e.g. {examples_text(cuts)})"
            for rate, cuts in sorted(by_rate.items())
        )
        yield convention_issue(
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
