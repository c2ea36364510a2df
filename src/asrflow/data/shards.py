"""Lhotse Shar shards of a filtered split: what training reads on corpora of many short files.

Read one WAV at a time from network storage by several loader workers per GPU, a corpus of
millions of short clips costs more in ``open()`` calls than in the model. Shards are the known
fix (NeMo's tarred datasets, WebDataset, Lhotse Shar): the split's cuts are written in shards of
``shard_size`` cuts, each shard a ``cuts.NNNNNN.jsonl.gz`` (the cuts, transcripts and every
custom field, so slices and error messages still name the manifest line) beside a
``recording.NNNNNN.tar`` holding their audio, read front to back. This module writes them
(:func:`write_shards`, with Lhotse's :meth:`CutSet.to_shar`), describes them
(``shards.json``, :func:`read_index`) and finds a cut in them (:func:`find_cut`).

The costs, which is why shards are off by default (``corpora.<c>.shards`` turns them on):

- a copy of the split's audio, regenerated whenever the filtered split changes (the rule's input
  is the filtered manifest, so a data revision rewrites exactly the shards of the splits it
  changes); the original manifests and audio are never touched, and stay the way to open and
  listen to one utterance;
- the audio is stored as 16-bit PCM (``flac``, lossless for 16-bit sources and about half the
  size, or ``wav``): sources of more bits (24-bit, float) are rounded to 16 bits;
- shuffling becomes approximate: a shard order per epoch plus a buffer
  (:mod:`asrflow.train.batches.shard_stream`).

The files are byte-reproducible (Lhotse's tar members carry no time; the cut files are rewritten
with a fixed gzip header) and published whole: written to a directory beside the target and
renamed into place (:func:`asrflow.io.publish_dir`).
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrflow.data.cuts import load_cuts
from asrflow.errors import AsrflowError
from asrflow.hashing import sha256_file
from asrflow.io import is_write_failure, publish_dir, read_json, write_failed, write_jsonl_gz
from asrflow.settings import schema_defaults
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

SCHEMA = "asrflow.shards/1"
INDEX = "shards.json"
AUDIO_FORMATS = ("flac", "wav")
_DEFAULT = schema_defaults("corpora.*.shards")


@dataclass(frozen=True)
class ShardSettings:
    """``corpora.<corpus>.shards`` of the config (defaults the schema's)."""

    shard_size: int = _DEFAULT["shard_size"]
    audio_format: str = _DEFAULT["audio_format"]

    def __post_init__(self) -> None:
        if not isinstance(self.shard_size, int) or isinstance(self.shard_size, bool):
            raise AsrflowError(f"shards.shard_size must be an integer, got {self.shard_size!r}")
        if self.shard_size < 1:
            raise AsrflowError(f"shards.shard_size must be at least 1, got {self.shard_size}")
        if self.audio_format not in AUDIO_FORMATS:
            raise AsrflowError(
                f"shards.audio_format must be one of {', '.join(AUDIO_FORMATS)}, got "
                f"{self.audio_format!r}"
            )

    @classmethod
    def from_config(cls, shards: Mapping[str, Any]) -> ShardSettings:
        return cls(**dict(shards))


def write_shards(cuts_path: Pathlike, out_dir: Pathlike, settings: ShardSettings) -> dict:
    """Write the cuts of ``cuts_path`` as Lhotse Shar shards into ``out_dir``; returns the index
    (also written as ``out_dir/shards.json``). ``out_dir`` keeps what it held if anything fails,
    and keeps its mtimes if the new shards are byte-identical."""
    cuts_path, out = Path(cuts_path), Path(out_dir).absolute()
    cuts = load_cuts(cuts_path)
    if len(cuts) == 0:
        raise AsrflowError(f"{cuts_path}: no cuts to shard; the split is empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        paths = cuts.to_shar(
            tmp,
            fields={"recording": settings.audio_format},
            shard_size=settings.shard_size,
            warn_unused_fields=False,
        )
        shards = []
        for cut_file, audio_file in zip(paths["cuts"], paths["recording"], strict=True):
            records = _stable_gzip(Path(cut_file))
            shards.append(
                {
                    "cuts": Path(cut_file).name,
                    "recording": Path(audio_file).name,
                    "num_cuts": len(records),
                    "seconds": round(sum(float(r["duration"]) for r in records), 3),
                    "sha256": {
                        "cuts": sha256_file(cut_file),
                        "recording": sha256_file(audio_file),
                    },
                }
            )
        index = {
            "schema": SCHEMA,
            "source": str(cuts_path),
            "source_sha256": sha256_file(cuts_path),
            "shard_size": settings.shard_size,
            "audio_format": settings.audio_format,
            "num_cuts": len(cuts),
            "seconds": round(sum(s["seconds"] for s in shards), 3),
            "shards": shards,
        }
        (tmp / INDEX).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
        written = publish_dir(tmp, out)
    except Exception as exc:
        if is_write_failure(exc):
            raise write_failed(out, exc, kept="keeps the shards it held before") from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    log.info(
        "%s: %d cuts (%.1f h) in %d shard(s) of up to %d, %s audio -> %s%s",
        cuts_path,
        index["num_cuts"],
        index["seconds"] / 3600,
        len(shards),
        settings.shard_size,
        settings.audio_format,
        out,
        "" if written else " (unchanged)",
    )
    return index


def _stable_gzip(path: Path) -> list[dict]:
    """Rewrite a shard's ``cuts.*.jsonl.gz`` with a fixed gzip header (Lhotse's stamps the
    time); returns its records."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    write_jsonl_gz(path, records)
    return records


def read_index(shard_dir: Pathlike) -> dict:
    """``shards.json`` of a shard directory, checked: every shard file it names is there."""
    shard_dir = Path(shard_dir)
    path = shard_dir / INDEX
    if not path.is_file():
        raise AsrflowError(
            f"{shard_dir}: no {INDEX}, so this is not a complete shard directory written by "
            "asrflow; rerun the shard rule (snakemake regenerates it)"
        )
    index = read_json(path)
    if index.get("schema") != SCHEMA:
        raise AsrflowError(f"{path}: schema {index.get('schema')!r}, expected {SCHEMA!r}")
    for shard in index["shards"]:
        for field in ("cuts", "recording"):
            if not (shard_dir / shard[field]).is_file():
                raise AsrflowError(
                    f"{shard_dir / shard[field]} is missing: the shard directory is incomplete; "
                    "delete it and rerun the shard rule"
                )
    return index


def shard_fields(
    shard_dir: Pathlike, index: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Each shard of a directory as Lhotse Shar's fields, ``{"cuts": ..., "recording": ...}``
    (absolute paths, in shard order), with its ``num_cuts``; ``index``: its ``shards.json`` if
    already read."""
    shard_dir = Path(shard_dir).absolute()
    return [
        {
            "cuts": str(shard_dir / s["cuts"]),
            "recording": str(shard_dir / s["recording"]),
            "num_cuts": s["num_cuts"],
        }
        for s in (index or read_index(shard_dir))["shards"]
    ]


def iter_shard_ids(
    shard_dir: Pathlike, index: Mapping[str, Any] | None = None
) -> Iterator[tuple[int, int, str]]:
    """``(shard, position, cut ID)`` of every cut, in shard order, read from the cut files
    alone (no audio)."""
    for k, fields in enumerate(shard_fields(shard_dir, index)):
        with gzip.open(fields["cuts"], "rt", encoding="utf-8") as f:
            for position, line in enumerate(f):
                yield k, position, json.loads(line)["id"]


def find_cuts(shard_dir: Pathlike, cut_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Where each cut is: ``{cut ID: {"shard": k, "position": i, "cuts": <file>, "recording":
    <file>, "member": <name in the tar>}}``, for the IDs some shard holds. One pass over the cut
    files (no audio), ended once every ID is found."""
    index = read_index(shard_dir)
    fields = shard_fields(shard_dir, index)
    wanted, found = set(cut_ids), {}
    for k, position, cut_id in iter_shard_ids(shard_dir, index):
        if cut_id in wanted:
            member = f"{cut_id}.{index['audio_format']}"
            found[cut_id] = {"shard": k, "position": position, **fields[k], "member": member}
            if len(found) == len(wanted):
                break
    return found


def find_cut(shard_dir: Pathlike, cut_id: str) -> dict[str, Any]:
    """:func:`find_cuts` for one cut; :class:`AsrflowError` if no shard holds it."""
    found = find_cuts(shard_dir, [cut_id])
    if cut_id not in found:
        raise AsrflowError(f"no shard of {shard_dir} holds a cut {cut_id!r}")
    return found[cut_id]
