"""Reading and writing Lhotse CutSets the way every asrflow rule does.

Conventions for the cuts asrflow writes (one per utterance):

- a ``MonoCut`` with exactly one supervision spanning the cut;
- ``supervision.text`` is the transcript as the corpus gave it (normalization happens later, in
  one place: :mod:`asrflow.text`);
- ``supervision.speaker`` is the speaker (or ``None``);
- every other manifest field (``session``, ``condition``, ``has_entity``, ...) sits in
  ``supervision.custom``; :func:`field` reads them, and ``speaker`` too;
- ``supervision.custom["origin"]`` is ``"<manifest path>:<line>"`` so that errors can name the line;
- ``supervision.custom["segment"]`` is true when the manifest gave an offset, i.e. the cut is a
  part of its audio file rather than the whole file, and for every Kaldi utterance (its duration
  is its segment's or its file's, not a declared one to check against the file).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lhotse import CutSet, MonoCut, Recording, SupervisionSegment
from lhotse.audio import AudioSource
from lhotse.cut import Cut

from asrflow.io import write_jsonl_gz
from asrflow.types import Pathlike

ORIGIN = "origin"
SEGMENT = "segment"
"""Custom flag: the cut is a segment (offset/duration) of a longer file, not the whole file."""


def save_cuts(cuts: Iterable[Cut], path: Pathlike) -> int:
    """Write cuts as a byte-reproducible ``.jsonl.gz`` (atomic). Returns the count."""
    return write_jsonl_gz(path, (cut.to_dict() for cut in cuts))


def make_cut(
    *,
    utt_id: str,
    audio: str,
    sampling_rate: int,
    num_samples: int,
    duration: float,
    text: str,
    speaker: str | None = None,
    custom: dict[str, Any] | None = None,
    offset: float = 0.0,
    channels: int = 1,
) -> MonoCut:
    """One cut following the conventions above: the file ``audio`` as its recording (rate and
    length as its header says), and one supervision spanning ``[offset, offset + duration)``."""
    recording = Recording(
        id=utt_id,
        sources=[AudioSource(type="file", channels=list(range(channels)), source=audio)],
        sampling_rate=sampling_rate,
        num_samples=num_samples,
        duration=num_samples / sampling_rate,
    )
    sup = SupervisionSegment(
        id=utt_id,
        recording_id=utt_id,
        start=0.0,
        duration=duration,
        channel=0,
        text=text,
        speaker=speaker,
        custom=custom or {},
    )
    return MonoCut(
        id=utt_id,
        start=offset,
        duration=duration,
        channel=0,
        recording=recording,
        supervisions=[sup],
    )


def load_cuts(path: Pathlike) -> CutSet:
    """Load a CutSet eagerly (asrflow's data-half manifests fit in memory)."""
    cuts = CutSet.from_file(Path(path))  # lazy for .jsonl.gz, and None when the file is empty
    return CutSet() if cuts is None else cuts.to_eager()


def supervision(cut: Cut):
    """The single supervision of an asrflow cut."""
    if len(cut.supervisions) != 1:
        raise ValueError(
            f"cut {cut.id}: expected exactly one supervision, got {len(cut.supervisions)}"
        )
    return cut.supervisions[0]


def text(cut: Cut) -> str:
    """The raw transcript of a cut ("" when missing)."""
    return supervision(cut).text or ""


def field(cut: Cut, name: str, default: Any = None) -> Any:
    """A manifest field of a cut: ``speaker``, ``text``, ``id``, ``duration`` or a custom one."""
    sup = supervision(cut)
    if name == "speaker":
        return sup.speaker
    if name == "text":
        return sup.text
    if name == "id":
        return cut.id
    if name == "duration":
        return cut.duration
    return (sup.custom or {}).get(name, default)


def origin(cut: Cut) -> str:
    """Where the cut came from, ``"<manifest>:<line>"``, or the cut ID when unknown."""
    return str(field(cut, ORIGIN) or cut.id)
