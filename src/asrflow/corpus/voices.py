"""Isolated words spoken by many synthetic voices, written as a takes manifest like fsdd4's.

A small real corpus has few speakers (fsdd4: four), and a model trained on three of them learns
those voices, not the words: on the fourth it makes several times the errors it makes on dev.
Many eSpeak NG voices speaking the same closed vocabulary (here: the ten digits) give training
what the real corpus lacks, variety of voice and channel, while the real takes keep the model
on real speech. :func:`speak_takes` writes such a set of takes: per synthetic speaker an
English accent (:data:`ACCENTS`) and voice variant (:data:`VARIANTS`), a pitch, pitch range and
rate, and a channel of its own (a first-order spectral tilt and a noise floor at an SNR), and per
take a little jitter of rate and pitch; the silence eSpeak leaves around a word is trimmed as in
fsdd4's recordings. Its manifest (``all.jsonl``: ``audio_filepath``, ``duration``, ``text``,
``speaker``, ``utt_id``) is what :func:`asrflow.corpus.folds.build_fold` joins into strings.

Example::

    takes = speak_takes("results/voices", VoiceSettings(speakers=100, takes=3))
    fold = build_fold(takes, "results/folds/voices", FoldSettings(held_out="voice000"))
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile
from scipy.signal import lfilter

from asrflow.corpus.espeak import native_sample_rate, resample, synthesize
from asrflow.errors import AsrflowError
from asrflow.io import build_dir_once
from asrflow.types import Hz, Pathlike

logger = logging.getLogger(__name__)

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
ACCENTS = (
    "en",
    "en-us",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-029",
    "en-gb-x-gbcwmd",
    "en-gb-x-gbclan",
)
"""eSpeak NG's English accents (language codes of its bundled voices)."""
VARIANTS = (
    *(f"m{i}" for i in range(1, 9)),
    *(f"f{i}" for i in range(1, 6)),
    *("klatt", "klatt2", "klatt3", "klatt4", "max", "john", "david", "linda", "anika"),
    *("michel", "norbert", "edward", "adam", "ian", "Alex", "Andy"),
)
"""Voice variants shipped with eSpeak NG's data (``voices/!v``): male, female, Klatt-synthesis
and named voices."""
VERSION = 1
"""Of the writer: a change to what given settings write must bump it (rewrites the takes)."""


@dataclass(frozen=True)
class VoiceSettings:
    """Everything that decides the takes' bytes."""

    speakers: int = 100
    takes: int = 3
    """Takes of each word per speaker."""
    words: tuple[str, ...] = DIGITS
    sample_rate: Hz = 8000
    seed: int = 0
    snr_db: tuple[float, float] = (25.0, 50.0)
    """Range of each speaker's noise floor (SNR in dB, drawn uniformly)."""
    tilt: tuple[float, float] = (-0.6, 0.9)
    """Range of each speaker's channel: ``y[n] = x[n] - a x[n-1]``, ``a`` drawn uniformly
    (positive: brighter, a thin microphone; negative: duller)."""

    def __post_init__(self) -> None:
        if self.speakers < 1 or self.takes < 1 or not self.words:
            raise AsrflowError(
                f"voices: speakers ({self.speakers}), takes ({self.takes}) and words "
                f"({len(self.words)}) must each be at least 1"
            )
        if self.snr_db[0] > self.snr_db[1] or self.tilt[0] > self.tilt[1]:
            raise AsrflowError(f"voices: a range runs backwards: {self.snr_db}, {self.tilt}")


def speaker_name(index: int) -> str:
    return f"voice{index:03d}"


def speak_takes(out_dir: Pathlike, settings: VoiceSettings) -> Path:
    """Write the takes of ``settings`` to ``out_dir`` (``recordings/*.wav``, ``all.jsonl``,
    ``settings.json``) and return the manifest's path. Nothing is written when ``out_dir``
    already records the same settings; otherwise the directory is built under a temporary
    name and renamed."""
    out = Path(out_dir)
    record = {"writer": f"asrflow.corpus.voices/{VERSION}", **asdict(settings)}
    rows: list[dict] = []
    if not build_dir_once(out, record, lambda tmp: rows.extend(_write(tmp, settings))):
        logger.info("voices %s: already written with the same settings", out)
        return out / "all.jsonl"
    seconds = sum(r["duration"] for r in rows)
    logger.info("voices %s: %d takes, %.2f h", out, len(rows), seconds / 3600)
    return out / "all.jsonl"


def _write(out: Path, s: VoiceSettings) -> list[dict]:
    rng = np.random.default_rng(s.seed)
    native = native_sample_rate()
    (out / "recordings").mkdir(parents=True)
    rows: list[dict] = []
    for index in range(s.speakers):
        name = speaker_name(index)
        voice = f"{ACCENTS[rng.integers(len(ACCENTS))]}+{VARIANTS[rng.integers(len(VARIANTS))]}"
        pitch, pitch_range = int(rng.integers(15, 90)), int(rng.integers(20, 90))
        rate = int(rng.integers(120, 210))
        tilt, snr = float(rng.uniform(*s.tilt)), float(rng.uniform(*s.snr_db))
        for w, word in enumerate(s.words):
            for t in range(s.takes):
                samples = synthesize(
                    word,
                    voice=voice,
                    rate=int(np.clip(rate + rng.integers(-15, 16), 80, 450)),
                    pitch=int(np.clip(pitch + rng.integers(-5, 6), 0, 100)),
                    pitch_range=pitch_range,
                    seed=int(rng.integers(1 << 30)),
                )
                audio = resample(samples, native, s.sample_rate) / 32768.0
                audio = _channel(audio, s.sample_rate, tilt, snr, rng)
                utt = f"{w}_{name}_{t}"
                path = f"recordings/{utt}.wav"
                soundfile.write(out / path, audio, s.sample_rate, subtype="PCM_16")
                rows.append(
                    {
                        "audio_filepath": path,
                        "duration": round(len(audio) / s.sample_rate, 4),
                        "text": word,
                        "speaker": name,
                        "utt_id": utt,
                        "voice": voice,
                    }
                )
    with (out / "all.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def _channel(
    x: np.ndarray, rate: Hz, tilt: float, snr_db: float, rng: np.random.Generator
) -> np.ndarray:
    """A take as one speaker's microphone hears it: tilted, trimmed to the word (2 % of its peak,
    25 ms kept either side), levelled to a random peak, with a noise floor at ``snr_db``."""
    y = lfilter([1.0, -tilt], [1.0], x)
    loud = np.flatnonzero(np.abs(y) > 0.02 * np.abs(y).max())
    if loud.size == 0:
        raise AsrflowError("voices: eSpeak returned silence")
    margin = int(0.025 * rate)
    y = y[max(loud[0] - margin, 0) : loud[-1] + margin]
    y = y / np.abs(y).max() * rng.uniform(0.2, 0.9)
    noise = rng.standard_normal(len(y)) * np.sqrt(np.mean(y**2) / 10 ** (snr_db / 10))
    return np.clip(y + noise, -1.0, 1.0)
