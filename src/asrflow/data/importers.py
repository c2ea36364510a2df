"""Importers: NeMo JSONL manifests, Kaldi data directories and Lhotse cut manifests -> CutSet.

Every importer returns plain lists of asrflow cuts (see :mod:`asrflow.data.cuts`): one
``MonoCut`` per utterance, one supervision, the raw transcript, and the manifest fields kept in
``supervision.custom`` together with ``origin = "<manifest>:<line>"`` so that later errors can
name the line a user has to fix.

Importers are deliberately lenient about *content* (an empty transcript or a wrong duration is
imported as declared and reported by :mod:`asrflow.data.validate`), but strict about *structure*:
a line that is not JSON, lacks a required key, or points at audio that cannot be opened cannot
become a cut, so all such lines are collected and raised together as one
:class:`~asrflow.errors.AsrflowError`.

Relative audio paths in a NeMo manifest are resolved against the directory of the manifest
itself, never against the working directory, so a corpus can be moved as a whole.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lhotse import MonoCut
from lhotse.utils import add_durations, compute_num_samples

from asrflow.data.audio import AudioInfo, read_audio_infos, unreadable
from asrflow.data.cuts import ORIGIN, SEGMENT, make_cut
from asrflow.data.kaldi_dir import HINT as KALDI_HINT
from asrflow.data.kaldi_dir import KaldiDir, check_tables, read_tables
from asrflow.data.lhotse_import import import_lhotse
from asrflow.data.manifest_text import (
    ENCODING_HINT,
    _hint,
    _problem,
    _raise_problems,
    json_line,
    read_text_lines,
)
from asrflow.errors import AsrflowError
from asrflow.types import Hz, Pathlike

log = logging.getLogger(__name__)

NEMO_REQUIRED = ("audio_filepath", "duration", "text")
NEMO_RESERVED = ("audio_filepath", "duration", "text", "offset")
ID_KEYS = ("utt_id", "id", "utterance_id")


def _cut(*, info: AudioInfo, **kwargs: Any) -> MonoCut:
    return make_cut(
        sampling_rate=info.sampling_rate,
        num_samples=info.num_samples,
        channels=info.channels,
        **kwargs,
    )


def _manifest_audio_paths(base: Path) -> Callable[[str], str]:
    """``raw -> str(Path(raw).expanduser())``, made absolute against ``base`` when relative.

    Per line this is a string join onto the memoized result for the line's directory (pathlib
    parsing per line costs more than the rest of the import); the result is the same string.
    """
    dirs: dict[str, str] = {}

    def full(raw: str) -> str:
        audio = Path(raw).expanduser()
        return str(audio if audio.is_absolute() else base / audio)

    def join(raw: str) -> str:
        head, tail = os.path.split(raw)
        if os.sep != "/" or not head or tail in ("", ".") or "~" in raw:
            return full(raw)
        prefix = dirs.get(head)
        if prefix is None:
            prefix = dirs[head] = full(head)
        return prefix + tail if prefix.endswith("/") else f"{prefix}/{tail}"

    return join


def import_nemo(manifest: Pathlike, threads: int = 16) -> list[MonoCut]:
    """Import a NeMo JSONL manifest (``audio_filepath``, ``duration``, ``text``, ``offset``?).

    The utterance ID is ``utt_id`` (or ``id``/``utterance_id``) when present, else the audio
    file's stem (plus the offset in ms when the line has one). ``speaker`` becomes the
    supervision speaker; every other key is kept in ``supervision.custom``.

    >>> cuts = import_nemo("corpus/train.jsonl")  # doctest: +SKIP
    """
    manifest = Path(manifest)
    base = manifest.parent.resolve()
    problems: list[str] = []
    rows = _nemo_rows(manifest, _manifest_audio_paths(base), problems)
    _raise_problems(
        "NeMo manifest",
        manifest,
        problems,
        _hint(
            problems,
            "Fix these lines (each must be a JSON object with audio_filepath, duration "
            "and text) or remove them.",
        ),
    )

    infos = read_audio_infos((audio for _, _, audio in rows), threads=threads)
    cuts: list[MonoCut] = []
    for lineno, row, audio in rows:
        info = infos[audio]
        where = f"{manifest}:{lineno}"
        if isinstance(info, Exception):
            problems.append(_problem(where, f"audio {audio} {unreadable(audio, info)}"))
            continue
        cuts.append(_nemo_cut(row, audio, info, where))
    _raise_problems(
        "NeMo manifest",
        manifest,
        problems,
        "Audio paths are resolved relative to the manifest's own directory "
        f"({base}). Fix the paths or remove the lines.",
    )
    log.info("imported %d utterances from %s", len(cuts), manifest)
    return cuts


def _nemo_rows(
    manifest: Path, audio_path: Callable[[str], str], problems: list[str]
) -> list[tuple[int, dict[str, Any], str]]:
    """``(line number, row, audio path)`` of every well-formed line of a NeMo manifest; each
    other non-blank line is added to ``problems``."""
    rows: list[tuple[int, dict[str, Any], str]] = []
    for lineno, line in read_text_lines(manifest, problems):
        if not line.strip():
            continue
        where = f"{manifest}:{lineno}"
        row, bad_json = json_line(line)
        if bad_json is not None:
            problems.append(_problem(where, bad_json))
            continue
        if not isinstance(row, dict):
            problems.append(_problem(where, "a line must be a JSON object"))
            continue
        missing = [k for k in NEMO_REQUIRED if k not in row]
        if missing:
            problems.append(_problem(where, f"missing key(s) {', '.join(missing)}"))
            continue
        try:
            float(row["duration"])
            offset = float(row.get("offset", 0.0) or 0.0)
        except (TypeError, ValueError):
            problems.append(_problem(where, "duration/offset must be numbers"))
            continue
        if offset < 0:
            problems.append(
                _problem(
                    where,
                    f"offset must not be negative (got {row['offset']}): it is where the "
                    "utterance starts in its audio file, in seconds",
                )
            )
            continue
        rows.append((lineno, row, audio_path(str(row["audio_filepath"]))))
    return rows


def _nemo_cut(row: dict[str, Any], audio: str, info: AudioInfo, where: str) -> MonoCut:
    """The cut of one NeMo manifest line (``where``) whose audio could be read."""
    offset = float(row.get("offset", 0.0) or 0.0)
    utt_id = next((str(row[k]) for k in ID_KEYS if row.get(k) not in (None, "")), None)
    if utt_id is None:
        utt_id = Path(audio).stem + (f"-{round(offset * 1000):08d}" if offset else "")
    custom = {k: v for k, v in row.items() if k not in NEMO_RESERVED and k != "speaker"}
    custom[ORIGIN] = where
    if "offset" in row:
        custom[SEGMENT] = True
    speaker = row.get("speaker")
    return _cut(
        utt_id=utt_id,
        audio=audio,
        info=info,
        offset=offset,
        duration=float(row["duration"]),
        text="" if row["text"] is None else str(row["text"]),
        speaker=None if speaker is None else str(speaker),
        custom=custom,
    )


def import_kaldi(data_dir: Pathlike, sampling_rate: Hz, threads: int = 16) -> list[MonoCut]:
    """Import a Kaldi data directory (wav.scp, text, segments?, utt2spk?): one cut per utterance.

    ``sampling_rate`` is the rate declared for the corpus; the validation rule re-reads every
    header and reports files whose real rate differs. Pipe commands in wav.scp are not supported
    (asrflow must be able to hash and header-read every audio file). Every table must be UTF-8
    (a leading byte-order mark is ignored with a warning), and every line of every table must
    fit the others (:func:`asrflow.data.kaldi_dir.check_tables`); each one that does not is
    named. Durations are what Lhotse's Kaldi loader makes of them: each file's, floored to the
    millisecond, at ``sampling_rate``; a segment ending at -1 runs to the end of its file.
    """
    data_dir = Path(data_dir)
    wav_scp = data_dir / "wav.scp"
    if not wav_scp.is_file():
        raise AsrflowError(f"cannot import Kaldi data dir {data_dir}: {wav_scp} does not exist")
    problems: list[str] = []
    tables = read_tables(data_dir, problems)
    _raise_problems("Kaldi data dir", data_dir, problems, ENCODING_HINT)
    kaldi = check_tables(data_dir, tables, problems)
    infos = read_audio_infos(kaldi.audio.values(), threads=threads)
    problems += [
        _problem(
            f"{wav_scp}:{kaldi.wav_lines[rid].lineno}",
            f"audio {path} of recording {rid} {unreadable(path, infos[path])}",
        )
        for rid, path in kaldi.audio.items()
        if isinstance(infos[path], Exception)
    ]
    _raise_problems(
        "Kaldi data dir",
        data_dir,
        problems,
        f"{KALDI_HINT}\nList one readable audio file per recording in wav.scp (convert piped "
        "audio to files first, e.g. with sox).",
    )
    out = [_kaldi_cut(kaldi, utt, infos, sampling_rate) for utt in kaldi.utterances]
    log.info("imported %d utterances from %s", len(out), data_dir)
    return out


def _kaldi_cut(
    kaldi: KaldiDir, utt: str, infos: dict[str, AudioInfo | Exception], sampling_rate: Hz
) -> MonoCut:
    """The cut of utterance ``utt``, its origin its line of ``text``."""
    audio = kaldi.audio[kaldi.recording(utt)]
    info = infos[audio]
    assert isinstance(info, AudioInfo)  # unreadable audio was refused
    whole = math.floor(1000 * info.duration) / 1000  # as lhotse.kaldi.get_duration
    offset, duration = 0.0, whole
    if kaldi.segments is not None:
        seg = kaldi.segments[utt]
        end = whole if seg.end is None else seg.end
        offset, duration = seg.start, add_durations(end, -seg.start, sampling_rate=sampling_rate)
    where = f"{kaldi.path / 'text'}:{kaldi.text[utt].lineno}"
    return _cut(
        utt_id=utt,
        audio=audio,
        info=AudioInfo(sampling_rate, compute_num_samples(whole, sampling_rate), 1),
        offset=offset,
        duration=duration,
        text=kaldi.text[utt].value,
        speaker=kaldi.speakers.get(utt),
        # a Kaldi utterance declares no duration of its own to check against its file's: what
        # validation checks is that it lies inside the file (as before asrflow read the tables)
        custom={ORIGIN: where, SEGMENT: True},
    )


def import_manifest(
    fmt: str, path: Pathlike, *, sampling_rate: Hz = 16000, threads: int = 16
) -> list[MonoCut]:
    """Import one manifest of format ``fmt`` (``nemo``, ``kaldi`` or ``lhotse``)."""
    if fmt == "nemo":
        return import_nemo(path, threads=threads)
    if fmt == "kaldi":
        return import_kaldi(path, sampling_rate=sampling_rate, threads=threads)
    if fmt == "lhotse":
        return import_lhotse(path, threads=threads)
    raise AsrflowError(f"unknown manifest format {fmt!r}; use one of nemo, kaldi, lhotse")
