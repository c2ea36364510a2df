"""Leave-one-speaker-out folds of connected strings, written as NeMo corpora on disk.

For a held-out speaker S of a manifest of isolated takes (``../shared/corpora/fsdd4``: four
speakers' spoken digits), the other speakers train and S is the test set. Every take is used
exactly once: each speaker's takes are shuffled (seeded per speaker) and partitioned into
connected strings of ``words`` takes (joined with pauses by :func:`asrflow.corpus.connected.join`),
so no recording is heard twice and none is both trained on and tested.

The dev set comes in two variants (:data:`DEV_VARIANTS`):

- ``takes``: ``dev_fraction`` of each training speaker's takes (seeded) make the dev strings, so
  dev shares its speakers with train (its corpus needs ``validation.allow_group_overlap:
  [speaker]``) and measures how well the model knows voices it was trained on;
- ``speaker``: the training speaker after S in alphabetical order (cyclically) is held out whole
  as dev, so dev, like test, is an unheard speaker; train has the remaining speakers.

:func:`build_fold` writes ``train.jsonl``, ``dev.jsonl`` and ``test.jsonl`` (``audio_filepath``
relative to the fold directory, ``duration``, ``text``, ``speaker``, ``utt_id``), the 16-bit WAVs
under ``audio/<split>/``, ``parts.json`` (the takes each string joins) and ``summary.json``
(speakers, utterances and seconds per split), atomically, and skips the work when the fold
directory already holds a ``settings.json`` equal to its own.

Example::

    fold = build_fold("../shared/corpora/fsdd4/all.jsonl", "results/folds/nicolas",
                      FoldSettings(held_out="nicolas", dev="speaker"))
    fold.manifests["test"]  # results/folds/nicolas/test.jsonl: nicolas's 500 takes as strings
"""

from __future__ import annotations

import functools
import json
import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from asrflow.corpus.connected import (
    Recording,
    Take,
    fill_with,
    join,
    load,
    read_takes,
    room_tone,
)
from asrflow.errors import AsrflowError
from asrflow.hashing import sha256_file
from asrflow.io import build_dir_once, dumps_json, read_json, write_text
from asrflow.types import Hz, Pathlike, Seconds

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
DEV_VARIANTS = ("takes", "speaker")
PAUSE_FILLS = ("zeros", "room")
VERSION = 1
"""Of the builder: a change to what a given FoldSettings writes must bump it (rebuilds folds)."""


@dataclass(frozen=True)
class FoldSettings:
    """Everything that decides a fold's bytes (with the source manifest's hash)."""

    held_out: str
    """The test speaker."""
    dev: str = "takes"
    """``takes`` or ``speaker`` (module docstring)."""
    dev_fraction: float = 0.12
    """Share of each training speaker's takes in dev strings (``dev: takes`` only)."""
    words: tuple[int, int] = (3, 7)
    """Fewest and most takes in a string."""
    pause: tuple[Seconds, Seconds] = (0.05, 0.3)
    """Range of the uniform pause between takes, in seconds (as in
    :func:`~asrflow.corpus.connected.connected`)."""
    sample_rate: Hz = 8000
    seed: int = 0
    pause_fill: str = "zeros"
    """What a pause holds: ``zeros`` (digital silence) or ``room`` (the room tone of the takes
    it joins, :func:`~asrflow.corpus.connected.room_tone`: the speaker's own background, as
    between the words of one recording)."""

    def __post_init__(self) -> None:
        if self.dev not in DEV_VARIANTS:
            raise AsrflowError(f"fold dev {self.dev!r}: expected one of {', '.join(DEV_VARIANTS)}")
        if self.pause_fill not in PAUSE_FILLS:
            raise AsrflowError(
                f"fold pause_fill {self.pause_fill!r}: expected one of {', '.join(PAUSE_FILLS)}"
            )
        lo, hi = self.words
        if not 1 <= lo <= hi:
            raise AsrflowError(f"fold words {self.words}: expected 1 <= fewest <= most")
        if not 0 < self.dev_fraction < 1:
            raise AsrflowError(f"fold dev_fraction {self.dev_fraction}: expected 0 < it < 1")


@dataclass(frozen=True)
class Fold:
    """A fold on disk."""

    dir: Path
    manifests: dict[str, Path]
    """Split -> its NeMo manifest."""
    summary: dict[str, Any]
    """``summary.json``: speakers, utterances and seconds per split."""


def dev_speaker(speakers: Sequence[str], held_out: str) -> str:
    """The speaker after ``held_out`` in alphabetical order, cyclically (``dev: speaker``).

    >>> dev_speaker(["lucas", "george", "nicolas", "jackson"], "nicolas")
    'george'
    """
    order = sorted(speakers)
    return order[(order.index(held_out) + 1) % len(order)]


def split_speakers(speakers: Sequence[str], settings: FoldSettings) -> dict[str, list[str]]:
    """Split -> its speakers (sorted).

    >>> split_speakers(["george", "jackson", "lucas", "nicolas"], FoldSettings("lucas", "speaker"))
    {'train': ['george', 'jackson'], 'dev': ['nicolas'], 'test': ['lucas']}
    """
    if settings.held_out not in speakers:
        raise AsrflowError(
            f"held-out speaker {settings.held_out!r} is not in the manifest (it has: "
            f"{', '.join(sorted(speakers)) or 'none'})"
        )
    rest = sorted(s for s in speakers if s != settings.held_out)
    if settings.dev == "takes":
        if not rest:
            raise AsrflowError("a fold needs at least one training speaker")
        return {"train": rest, "dev": rest, "test": [settings.held_out]}
    if len(rest) < 2:
        raise AsrflowError("dev: speaker needs at least three speakers (train, dev, test)")
    dev = dev_speaker(speakers, settings.held_out)
    return {"train": [s for s in rest if s != dev], "dev": [dev], "test": [settings.held_out]}


def string_lengths(n: int, words: tuple[int, int], rng: np.random.Generator) -> list[int]:
    """Lengths of strings of ``words[0]..words[1]`` takes that add up to ``n`` exactly: each
    drawn uniformly from the lengths that leave a remainder that can still be partitioned.

    >>> lengths = string_lengths(23, (3, 7), np.random.default_rng(0))
    >>> sum(lengths), all(3 <= k <= 7 for k in lengths)
    (23, True)
    """
    lo, hi = words
    out: list[int] = []
    left = n
    while left:
        # k is allowed when what is left after it is 0 or can still be partitioned: at most
        # hi * m and at least lo * m for some number of strings m (the ranges overlap from some m
        # on, so a short check suffices)
        allowed = [k for k in range(lo, min(hi, left) + 1) if _partitionable(left - k, lo, hi)]
        if not allowed:
            raise AsrflowError(f"{n} takes cannot be cut into strings of {lo}-{hi} takes")
        out.append(int(rng.choice(allowed)))
        left -= out[-1]
    return out


def _partitionable(n: int, lo: int, hi: int) -> bool:
    return any(lo * m <= n <= hi * m for m in range(n // lo + 1)) if n else True


def _rng(settings: FoldSettings, speaker: str) -> np.random.Generator:
    """One generator per speaker, so a speaker's strings do not depend on the other speakers."""
    return np.random.default_rng([settings.seed, zlib.crc32(speaker.encode("utf-8"))])


def plan_speaker(
    takes: Sequence[Take], settings: FoldSettings, with_dev: bool
) -> dict[str, list[list[Take]]]:
    """Split -> the strings (lists of takes) of one speaker: ``train`` (and ``dev`` when
    ``with_dev``: ``dev_fraction`` of the takes) for a training speaker. Every take once."""
    rng = _rng(settings, takes[0].speaker if takes else "")
    order = [takes[int(i)] for i in rng.permutation(len(takes))]
    parts = {"train": order}
    if with_dev:
        k = round(settings.dev_fraction * len(order))
        parts = {"dev": order[:k], "train": order[k:]}
    out = {}
    for split, chosen in parts.items():
        strings, at = [], 0
        for k in string_lengths(len(chosen), settings.words, rng):
            strings.append(chosen[at : at + k])
            at += k
        out[split] = strings
    return out


def select_takes(
    source: Pathlike, out: Pathlike, keep: Callable[[dict[str, Any]], bool], what: str = "takes"
) -> Path:
    """The rows of the takes manifest ``source`` that ``keep`` accepts, written to ``out`` with
    each ``audio_filepath`` absolute (a fold built from ``out`` reads the recordings where they
    are); when none is kept, an error naming ``source`` and ``what`` was asked for."""
    source = Path(source)
    kept = []
    for line in source.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if keep(row):
            row["audio_filepath"] = str((source.parent / row["audio_filepath"]).resolve())
            kept.append(json.dumps(row))
    if not kept:
        raise AsrflowError(f"{source}: no {what}")
    write_text(out, "\n".join(kept) + "\n")
    return Path(out)


def build_fold(source: Pathlike, out_dir: Pathlike, settings: FoldSettings) -> Fold:
    """The fold of ``settings.held_out`` from the takes of the NeMo manifest ``source``, written
    to ``out_dir`` (module docstring); nothing is rebuilt when ``out_dir/settings.json`` already
    records the same settings and source."""
    source, out = Path(source), Path(out_dir)
    record = {
        "builder": f"asrflow.corpus.folds/{VERSION}",
        "source": str(source.resolve()),
        "source_sha256": sha256_file(source),
        **asdict(settings),
    }

    def write(tmp: Path) -> None:
        takes = read_takes(source)
        _write(tmp, takes, split_speakers(list(takes), settings), settings)

    if not build_dir_once(out, record, write):
        logger.info("fold %s: already built with the same settings", out)
        return _fold(out)
    fold = _fold(out)
    logger.info(
        "fold %s: %s",
        out,
        ", ".join(f"{s} {fold.summary['splits'][s]['utterances']}" for s in SPLITS),
    )
    return fold


def _write(
    out: Path,
    takes: dict[str, list[Take]],
    speakers: dict[str, list[str]],
    settings: FoldSettings,
) -> None:
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    parts: dict[str, list[str]] = {}
    roles = {s: split for split in ("train", "test") for s in speakers[split]}
    roles |= {s: "dev" for s in speakers["dev"] if settings.dev == "speaker"}
    for speaker, role in sorted(roles.items()):
        with_dev = role == "train" and settings.dev == "takes"
        plan = plan_speaker(takes[speaker], settings, with_dev)
        rng = _rng(settings, f"{speaker}/pauses")
        room_rng = _rng(settings, f"{speaker}/room")
        for split, strings in sorted(plan.items()):
            target = role if role != "train" else split
            for i, chosen in enumerate(strings):
                utt_id = f"{speaker}_{target}_{i:04d}"
                sr = settings.sample_rate
                pieces = [Recording(load(t, sr), t.text, [t.id]) for t in chosen]
                fill = None
                if settings.pause_fill == "room":
                    tone = room_tone([p.audio for p in pieces], sr)
                    fill = functools.partial(fill_with, tone, rng=room_rng)
                joined = join(pieces, rng, sample_rate=sr, pause=settings.pause, fill=fill)
                rel = f"audio/{target}/{utt_id}.wav"
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                soundfile.write(
                    out / rel, joined.audio, settings.sample_rate, subtype="PCM_16", format="WAV"
                )
                rows[target].append(
                    {
                        "audio_filepath": rel,
                        "duration": round(len(joined.audio) / settings.sample_rate, 6),
                        "text": joined.text,
                        "speaker": speaker,
                        "utt_id": utt_id,
                    }
                )
                parts[utt_id] = joined.parts
    for split in SPLITS:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[split])
        (out / f"{split}.jsonl").write_text(text, encoding="utf-8")
    summary = {
        "held_out": settings.held_out,
        "dev": settings.dev,
        "splits": {
            split: {
                "speakers": speakers[split],
                "utterances": len(rows[split]),
                "takes": sum(len(parts[r["utt_id"]]) for r in rows[split]),
                "seconds": round(sum(r["duration"] for r in rows[split]), 3),
            }
            for split in SPLITS
        },
    }
    (out / "summary.json").write_text(dumps_json(summary), encoding="utf-8")
    (out / "parts.json").write_text(dumps_json(parts), encoding="utf-8")


def _fold(out: Path) -> Fold:
    return Fold(out, {s: out / f"{s}.jsonl" for s in SPLITS}, read_json(out / "summary.json"))
