"""Connected recordings from isolated takes: several takes of one speaker joined with pauses.

``../shared/corpora/fsdd4`` holds real isolated spoken digits; joined, a speaker's takes make
connected-digit strings ("four one zero five"), a more realistic ASR task than single words,
and joined again, long recordings (40 s, 3 or 10 minutes) whose long-form decoding can be
compared with the decoding of their pieces alone (``bench/longform.py``).

Example::

    takes = read_takes("../shared/corpora/fsdd4/all.jsonl")
    rng = np.random.default_rng(0)
    pieces = connected(takes["george"], rng, words=(3, 6), sample_rate=8000)
    long = join(pieces, rng, seconds=40, sample_rate=8000)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike


@dataclass(frozen=True)
class Take:
    """One isolated recording of a NeMo manifest line."""

    id: str
    audio: Path
    text: str
    speaker: str


@dataclass
class Recording:
    """A joined recording: its samples, its transcript and what it was joined from."""

    audio: np.ndarray
    text: str
    parts: list[str] = field(default_factory=list)
    """IDs of the takes (or recordings) it joins, in order."""


def read_takes(manifest: Pathlike) -> dict[str, list[Take]]:
    """A NeMo manifest's lines by speaker (audio paths resolved against its directory)."""
    manifest = Path(manifest)
    by_speaker: dict[str, list[Take]] = {}
    with manifest.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                take = Take(
                    id=row.get("utt_id") or Path(row["audio_filepath"]).stem,
                    audio=manifest.parent / row["audio_filepath"],
                    text=row["text"],
                    speaker=row.get("speaker") or "",
                )
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise AsrflowError(f"{manifest}:{n}: not a NeMo manifest line ({e})") from None
            by_speaker.setdefault(take.speaker, []).append(take)
    return by_speaker


def load(take: Take, sample_rate: int) -> np.ndarray:
    """A take's samples as float32 mono at ``sample_rate`` (which must be the file's)."""
    audio, rate = soundfile.read(take.audio, dtype="float32", always_2d=True)
    if rate != sample_rate:
        raise AsrflowError(f"{take.audio}: {rate} Hz, expected {sample_rate} Hz")
    return audio.mean(axis=1)


def join(
    parts: Sequence[Recording],
    rng: np.random.Generator,
    *,
    sample_rate: int,
    pause: tuple[float, float] = (0.1, 0.4),
    fill: Callable[[int], np.ndarray] | None = None,
) -> Recording:
    """``parts`` one after the other with a pause of ``pause`` seconds (uniform) between them;
    ``fill(n)`` gives a pause's ``n`` samples (digital silence without it)."""
    chunks: list[np.ndarray] = []
    for i, part in enumerate(parts):
        if i:
            n = round(rng.uniform(*pause) * sample_rate)
            chunks.append(np.zeros(n, np.float32) if fill is None else fill(n).astype(np.float32))
        chunks.append(part.audio.astype(np.float32))
    return Recording(
        np.concatenate(chunks) if chunks else np.zeros(0, np.float32),
        " ".join(p.text for p in parts),
        [pid for p in parts for pid in p.parts],
    )


ROOM_FRAME = 0.02
"""Seconds of a room-tone frame (:func:`room_tone`)."""


def room_tone(audios: Sequence[np.ndarray], sample_rate: int, share: float = 0.1) -> np.ndarray:
    """The quietest frames of ``audios`` (one recording session's takes): the 20-ms frames whose
    RMS is in the lowest ``share`` of them, as ``(frames, samples)``: what the room and the
    microphone sound like between words.

    >>> takes = [np.r_[np.full(160, 0.001), np.full(480, 0.5)]]
    >>> float(room_tone(takes, 8000, share=0.25).max())
    0.001
    """
    size = round(ROOM_FRAME * sample_rate)
    frames = [a[: len(a) // size * size].reshape(-1, size) for a in audios if len(a) >= size]
    if not frames:
        raise AsrflowError(f"room_tone: no recording holds one {ROOM_FRAME * 1000:.0f}-ms frame")
    stacked = np.concatenate(frames)
    rms = np.sqrt(np.mean(stacked.astype(np.float64) ** 2, axis=1))
    return stacked[rms <= np.quantile(rms, share)]


def fill_with(tone: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of room tone: frames of ``tone`` (:func:`room_tone`) drawn at random and
    overlap-added at half a frame under a sine window, whose squares sum to one, so the level of
    noise-like frames is kept and no frame edge clicks."""
    if n <= 0:
        return np.zeros(0, np.float32)
    size = tone.shape[1]
    hop = size // 2
    window = np.sin(np.pi * (np.arange(size) + 0.5) / size)
    count = n // hop + 2
    out = np.zeros((count + 1) * hop, np.float64)
    for i, k in enumerate(rng.integers(0, len(tone), count)):
        out[i * hop : i * hop + size] += tone[k] * window
    return out[hop : hop + n].astype(np.float32)  # from where two frames overlap


def connected(
    takes: Sequence[Take],
    rng: np.random.Generator,
    *,
    words: tuple[int, int],
    sample_rate: int,
    count: int,
    pause: tuple[float, float] = (0.05, 0.3),
) -> list[Recording]:
    """``count`` connected strings of ``words[0]..words[1]`` takes each, drawn from ``takes``
    with replacement (one speaker's, so a string sounds like one person speaking)."""
    if not takes:
        raise AsrflowError("no takes to join")
    out = []
    for _ in range(count):
        n = int(rng.integers(words[0], words[1] + 1))
        chosen = [takes[int(i)] for i in rng.integers(0, len(takes), n)]
        parts = [Recording(load(t, sample_rate), t.text, [t.id]) for t in chosen]
        out.append(join(parts, rng, sample_rate=sample_rate, pause=pause))
    return out


def until(pieces: Sequence[Recording], seconds: float, sample_rate: int) -> list[Recording]:
    """The first of ``pieces`` that together last at least ``seconds`` (all of them if less)."""
    out, total = [], 0.0
    for p in pieces:
        if total >= seconds:
            break
        out.append(p)
        total += len(p.audio) / sample_rate
    return out
