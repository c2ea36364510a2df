"""Importing a Lhotse CutSet manifest (``.jsonl`` or ``.jsonl.gz``), for
:func:`asrflow.data.importers.import_manifest`.

Like the NeMo importer, every line that cannot become a cut (not JSON, not a cut, a key Lhotse
does not know, a key it needs missing) and every cut whose audio cannot be opened is named with
its line, and all are raised together as one :class:`~asrflow.errors.AsrflowError`; Lhotse's own
reader stopped at the first with a bare ``JSONDecodeError`` or ``TypeError``, and a missing audio
file was only found when the provenance record hashed it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from lhotse import CutSet, MonoCut
from lhotse.cut import Cut
from lhotse.cut.data import DataCut
from lhotse.serialization import deserialize_item

from asrflow.data.audio import AudioInfo, read_audio_infos, unreadable
from asrflow.data.cuts import ORIGIN, SEGMENT, make_cut
from asrflow.data.manifest_text import (
    _hint,
    _problem,
    _raise_problems,
    json_line,
    read_text_lines,
)
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

KIND = "Lhotse manifest"
FIELDS_OF = {
    "SupervisionSegment": "supervision",
    "Recording": "recording",
    "AudioSource": "recording source",
    "MonoCut": "cut",
    "MultiCut": "cut",
}
_UNEXPECTED = re.compile(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'")
_MISSING = re.compile(r"(\w+)\.__init__\(\) missing \d+ required positional arguments?: (.*)")


def import_lhotse(manifest: Pathlike, threads: int = 16) -> list[MonoCut]:
    """Import a Lhotse CutSet manifest (``.jsonl`` or ``.jsonl.gz``; any other name is read by
    :meth:`CutSet.from_file` as a whole).

    Cuts with several supervisions are split into one cut per supervision; supervision custom
    fields are kept and ``origin`` names the manifest line.
    """
    manifest = Path(manifest)
    problems: list[str] = []
    if manifest.name.endswith((".jsonl", ".jsonl.gz")):
        rows = _cut_lines(manifest, problems)
    else:
        rows = list(enumerate(CutSet.from_file(manifest) or [], start=1))
    _raise_problems(
        KIND,
        manifest,
        problems,
        _hint(
            problems,
            "Fix these lines (each must be one cut as Lhotse writes it, e.g. with "
            'CutSet.to_file; extra supervision fields go under "custom") or remove them.',
        ),
    )
    infos = read_audio_infos(
        (_source(cut) for _, cut in rows if _source(cut) is not None), threads=threads
    )
    for lineno, cut in rows:
        problem = _audio_problem(cut, infos)
        if problem is not None:
            problems.append(_problem(f"{manifest}:{lineno}", problem))
    _raise_problems(
        KIND,
        manifest,
        problems,
        "Fix the recordings' audio paths (sources[0].source) or remove the lines.",
    )
    out = [c for lineno, cut in rows for c in _asrflow_cuts(cut, f"{manifest}:{lineno}")]
    log.info("imported %d utterances from %s", len(out), manifest)
    return out


def _cut_lines(manifest: Path, problems: list[str]) -> list[tuple[int, Cut]]:
    """``(line number, cut)`` of every line that is one cut; each other non-blank line is added
    to ``problems``."""
    rows: list[tuple[int, Cut]] = []
    for lineno, line in read_text_lines(manifest, problems):
        if not line.strip():
            continue
        where = f"{manifest}:{lineno}"
        data, bad_json = json_line(line)
        if bad_json is not None:
            problems.append(_problem(where, bad_json))
        elif not isinstance(data, dict):
            problems.append(_problem(where, "a line must be a JSON object (one cut)"))
        else:
            cut, problem = _deserialized(data)
            if problem is not None:
                problems.append(_problem(where, problem))
            else:
                rows.append((lineno, cut))
    return rows


def _deserialized(data: dict) -> tuple[Cut | None, str | None]:
    """The cut a line's object describes, or ``(None, what is wrong)``."""
    try:
        item = deserialize_item(data)
    except TypeError as exc:
        return None, _field_problem(str(exc))
    except (KeyError, ValueError, AttributeError, AssertionError) as exc:
        what = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        return None, f"not a Lhotse cut ({what})"
    if not isinstance(item, Cut):
        return None, (
            f"a {type(item).__name__}, not a cut: a CutSet manifest holds one cut per line (is "
            "this a recordings or supervisions manifest? Combine them with "
            "CutSet.from_manifests)"
        )
    if not isinstance(item, DataCut):
        return None, f"a {type(item).__name__}: asrflow imports cuts of one recording each"
    if not item.has_recording:
        return None, "the cut has no recording (asrflow needs its audio)"
    return item, None


def _field_problem(message: str) -> str:
    """What a ``TypeError`` from a Lhotse constructor means for the line."""
    if m := _UNEXPECTED.search(message):
        what = FIELDS_OF.get(m[1], m[1])
        return (
            f"unknown key {m[2]!r} in a {what} (Lhotse's {m[1]} has no such field; put extra "
            'fields under "custom")'
        )
    if m := _MISSING.search(message):
        return f"missing key(s) {m[2]} in a {FIELDS_OF.get(m[1], m[1])}"
    return f"not a Lhotse cut ({message})"


def _source(cut: Cut) -> str | None:
    """The audio file of a cut's recording, ``None`` when it is not a file."""
    source = cut.recording.sources[0]
    return str(source.source) if source.type == "file" else None


def _audio_problem(cut: Cut, infos: dict[str, AudioInfo | Exception]) -> str | None:
    source = cut.recording.sources[0]
    if source.type != "file":
        return (
            f"recording {cut.recording.id}'s audio is a {source.type!r} source, not a file "
            "(asrflow must hash and header-read every audio file): write it to a file first"
        )
    path = str(source.source)
    info = infos[path]
    if not isinstance(info, Exception):
        return None
    return f"audio {path} {unreadable(path, info)}"


def _asrflow_cuts(cut: Cut, where: str) -> list[MonoCut]:
    """One asrflow cut per supervision of a Lhotse cut (the cut itself when it has none)."""
    pieces = (
        cut.trim_to_supervisions(keep_overlapping=False) if len(cut.supervisions) > 1 else [cut]
    )
    out: list[MonoCut] = []
    for piece in pieces:
        sup = piece.supervisions[0] if piece.supervisions else None
        custom = dict(sup.custom or {}) if sup is not None else {}
        custom[ORIGIN] = where
        rec = piece.recording
        if piece.start > 0 or piece.duration < rec.duration - 1e-3:
            custom[SEGMENT] = True
        out.append(
            make_cut(
                utt_id=sup.id if sup is not None else piece.id,
                audio=rec.sources[0].source,
                sampling_rate=rec.sampling_rate,
                num_samples=rec.num_samples,
                channels=rec.num_channels,
                offset=piece.start,
                duration=piece.duration,
                text=(sup.text if sup is not None else "") or "",
                speaker=sup.speaker if sup is not None else None,
                custom=custom,
            )
        )
    return out
