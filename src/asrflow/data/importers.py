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

import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lhotse import CutSet, MonoCut
from lhotse.cut import Cut
from lhotse.kaldi import load_kaldi_data_dir

from asrflow.data.audio import AudioInfo, read_audio_infos
from asrflow.data.cuts import ORIGIN, SEGMENT, make_cut
from asrflow.data.manifest_text import (
    BOM,
    ENCODING_HINT,
    _hint,
    _problem,
    _raise_problems,
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
            reason = "does not exist" if not Path(audio).exists() else f"cannot be opened ({info})"
            problems.append(_problem(where, f"audio {audio} {reason}"))
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
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(_problem(where, f"not valid JSON at column {exc.colno} ({exc.msg})"))
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
            float(row.get("offset", 0.0))
        except (TypeError, ValueError):
            problems.append(_problem(where, "duration/offset must be numbers"))
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


KALDI_TABLES = (
    "wav.scp",
    "text",
    "segments",
    "utt2spk",
    "spk2utt",
    "spk2gender",
    "utt2gender",
    "utt2dur",
    "reco2dur",
    "utt2lang",
)
"""The text tables of a Kaldi data directory that asrflow (through Lhotse) reads."""


def _line_numbers(lines: list[tuple[int, str]]) -> dict[str, int]:
    """Map the first token of each line of a Kaldi table to its 1-based line number."""
    found: dict[str, int] = {}
    for lineno, line in lines:
        key = line.split(maxsplit=1)[0] if line.strip() else None
        if key is not None:
            found.setdefault(key, lineno)
    return found


def _read_kaldi_tables(data_dir: Path, problems: list[str]) -> dict[str, list[tuple[int, str]]]:
    """The lines of every table present (see :func:`read_text_lines`), by file name."""
    return {
        name: read_text_lines(data_dir / name, problems)
        for name in KALDI_TABLES
        if (data_dir / name).is_file()
    }


def _without_bom(data_dir: Path, tables: dict[str, list[tuple[int, str]]], tmp: Path) -> Path:
    """``data_dir``, or a copy of its tables in ``tmp`` without their byte-order marks.

    Lhotse reads the tables itself and would take a BOM for part of the first ID; the user's
    files are never changed.
    """
    if not any((data_dir / name).read_bytes().startswith(BOM.encode()) for name in tables):
        return data_dir
    for name, lines in tables.items():
        (tmp / name).write_text("".join(line for _, line in lines), encoding="utf-8")
    return tmp


def import_kaldi(data_dir: Pathlike, sampling_rate: Hz, threads: int = 16) -> list[MonoCut]:
    """Import a Kaldi data directory (wav.scp, text, segments?, utt2spk?) through Lhotse.

    ``sampling_rate`` is the rate declared for the corpus; the validation rule re-reads every
    header and reports files whose real rate differs. Pipe commands in wav.scp are not supported
    (asrflow must be able to hash and header-read every audio file). Every table must be UTF-8
    (a leading byte-order mark is ignored with a warning).
    """
    data_dir = Path(data_dir)
    wav_scp = data_dir / "wav.scp"
    if not wav_scp.is_file():
        raise AsrflowError(f"cannot import Kaldi data dir {data_dir}: {wav_scp} does not exist")
    problems: list[str] = []
    tables = _read_kaldi_tables(data_dir, problems)
    _raise_problems("Kaldi data dir", data_dir, problems, ENCODING_HINT)
    scp_lines = _line_numbers(tables["wav.scp"])
    audio = _wav_scp_audio(wav_scp, tables["wav.scp"], problems)
    infos = read_audio_infos(audio.values(), threads=threads)
    problems += [
        _problem(
            f"{wav_scp}:{scp_lines[rid]}",
            f"audio {path} of recording {rid} "
            + ("does not exist" if not Path(path).exists() else "cannot be opened"),
        )
        for rid, path in audio.items()
        if isinstance(infos[path], Exception)
    ]
    _raise_problems(
        "Kaldi data dir",
        data_dir,
        problems,
        "List one readable audio file per recording in wav.scp (convert piped "
        "audio to files first, e.g. with sox).",
    )
    with tempfile.TemporaryDirectory(prefix="asrflow-kaldi-") as tmp:
        recordings, supervisions, _ = load_kaldi_data_dir(
            _without_bom(data_dir, tables, Path(tmp)),
            sampling_rate=sampling_rate,
            num_jobs=1,
            use_reco2dur=False,
        )
    text_lines = _line_numbers(tables.get("text", []))
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=supervisions)
    if supervisions is not None:
        cuts = cuts.trim_to_supervisions(keep_overlapping=False)
    out = [
        _kaldi_cut(cut, supervisions is not None, data_dir, text_lines, scp_lines) for cut in cuts
    ]
    log.info("imported %d utterances from %s", len(out), data_dir)
    return out


def _wav_scp_audio(
    wav_scp: Path, lines: list[tuple[int, str]], problems: list[str]
) -> dict[str, str]:
    """Recording ID -> audio path of every line of wav.scp that names a file; each line that
    does not (too short, a pipe command) is added to ``problems``."""
    audio: dict[str, str] = {}
    for lineno, line in lines:
        parts = line.split(maxsplit=1)
        if not parts:
            continue
        if len(parts) < 2:
            problems.append(_problem(f"{wav_scp}:{lineno}", "expected '<recording-id> <path>'"))
        elif parts[1].rstrip().endswith("|"):
            problems.append(
                _problem(
                    f"{wav_scp}:{lineno}", f"recording {parts[0]} is a pipe command, not a file"
                )
            )
        else:
            audio[parts[0]] = parts[1].strip()
    return audio


def _kaldi_cut(
    cut: Cut,
    segmented: bool,
    data_dir: Path,
    text_lines: dict[str, int],
    scp_lines: dict[str, int],
) -> MonoCut:
    """The asrflow cut of one Lhotse cut of a Kaldi data dir (``segmented``: the dir has
    supervisions), its origin the line of ``text`` or else of ``wav.scp``."""
    sup = cut.supervisions[0] if cut.supervisions else None
    utt_id = sup.id if sup is not None else cut.recording_id
    line = text_lines.get(utt_id)
    wav_scp = data_dir / "wav.scp"
    where = f"{data_dir / 'text'}:{line}" if line else f"{wav_scp}:{scp_lines.get(utt_id, '?')}"
    audio = cut.recording.sources[0].source
    rec = cut.recording
    info = AudioInfo(rec.sampling_rate, rec.num_samples, rec.num_channels)
    return _cut(
        utt_id=utt_id,
        audio=audio,
        info=info,
        offset=cut.start,
        duration=cut.duration,
        text=(sup.text if sup is not None else "") or "",
        speaker=sup.speaker if sup is not None else None,
        custom={ORIGIN: where, SEGMENT: True} if segmented else {ORIGIN: where},
    )


def import_lhotse(manifest: Pathlike) -> list[MonoCut]:
    """Import a Lhotse CutSet manifest (``.jsonl`` or ``.jsonl.gz``).

    Cuts with several supervisions are split into one cut per supervision; supervision custom
    fields are kept and ``origin`` names the manifest line.
    """
    manifest = Path(manifest)
    out: list[MonoCut] = []
    for lineno, cut in enumerate(CutSet.from_file(manifest), start=1):
        pieces = (
            cut.trim_to_supervisions(keep_overlapping=False) if len(cut.supervisions) > 1 else [cut]
        )
        for piece in pieces:
            sup = piece.supervisions[0] if piece.supervisions else None
            custom = dict(sup.custom or {}) if sup is not None else {}
            custom[ORIGIN] = f"{manifest}:{lineno}"
            rec = piece.recording
            if piece.start > 0 or piece.duration < rec.duration - 1e-3:
                custom[SEGMENT] = True
            audio = rec.sources[0].source
            info = AudioInfo(rec.sampling_rate, rec.num_samples, rec.num_channels)
            out.append(
                _cut(
                    utt_id=sup.id if sup is not None else piece.id,
                    audio=audio,
                    info=info,
                    offset=piece.start,
                    duration=piece.duration,
                    text=(sup.text if sup is not None else "") or "",
                    speaker=sup.speaker if sup is not None else None,
                    custom=custom,
                )
            )
    log.info("imported %d utterances from %s", len(out), manifest)
    return out


def import_manifest(
    fmt: str, path: Pathlike, *, sampling_rate: Hz = 16000, threads: int = 16
) -> list[MonoCut]:
    """Import one manifest of format ``fmt`` (``nemo``, ``kaldi`` or ``lhotse``)."""
    if fmt == "nemo":
        return import_nemo(path, threads=threads)
    if fmt == "kaldi":
        return import_kaldi(path, sampling_rate=sampling_rate, threads=threads)
    if fmt == "lhotse":
        return import_lhotse(path)
    raise AsrflowError(f"unknown manifest format {fmt!r}; use one of nemo, kaldi, lhotse")
