"""The embedded synthetic demo corpus: eSpeak NG speech from a small templated grammar.

:func:`~asrflow.corpus.plan.plan_speakers` and :func:`~asrflow.corpus.plan.plan_utterances`
decide everything (speakers, sessions, splits, texts, slices, noise) from the seed, without
synthesising (:mod:`asrflow.corpus.plan`); :func:`generate_corpus` renders the plan to
``out_dir/audio/<utt_id>.wav`` and writes ``train.jsonl``, ``dev.jsonl`` and ``test.jsonl``
(NeMo-style, audio paths relative to the manifest). Same config, same bytes.
"""

from __future__ import annotations

import json
import logging
import time
from functools import lru_cache
from math import gcd
from pathlib import Path

import numpy as np
import soundfile as sf

from asrflow.corpus import vocabulary
from asrflow.corpus.espeak import native_sample_rate, resample, synthesize
from asrflow.corpus.plan import (
    EN_VARIANTS,
    SPLITS,
    SyntheticCorpusConfig,
    UtterancePlan,
    _pick,
    _sentence,
    plan_utterances,
)
from asrflow.io import atomic_output, write_text
from asrflow.types import Hz, Pathlike, Seconds

logger = logging.getLogger(__name__)


def mix_at_snr(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``speech + g * noise`` with ``g`` chosen so that the SNR is ``snr_db`` dB.

    Powers are mean squares over the whole signals (the speech's silences included).
    """
    speech = np.asarray(speech, dtype=np.float64)
    noise = np.asarray(noise, dtype=np.float64)
    if speech.shape != noise.shape:
        raise ValueError(f"speech {speech.shape} and noise {noise.shape} differ in shape")
    p_speech, p_noise = float(np.mean(speech**2)), float(np.mean(noise**2))
    if p_noise <= 0.0:
        raise ValueError("noise has zero power")
    return speech + np.sqrt(p_speech / (p_noise * 10.0 ** (snr_db / 10.0))) * noise


def coloured_noise(
    rng: np.random.Generator, n: int, sample_rate: Hz, exponent: float
) -> np.ndarray:
    """Unit-RMS noise with power spectrum ~ 1/f**exponent (1: pink, 2: brown), above 40 Hz."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, d=1.0 / sample_rate)
    shape = np.where(freqs >= 40.0, np.maximum(freqs, 40.0) ** (-exponent / 2.0), 0.0)
    x = np.fft.irfft(spectrum * shape, n=n)
    return x / (np.sqrt(np.mean(x**2)) + 1e-12)


def _speak(
    text: str, voice: str, rate: int, pitch: int, pitch_range: int, seed: int, sample_rate: Hz
) -> np.ndarray:
    samples = synthesize(text, voice, rate, pitch, pitch_range, seed=seed)
    return resample(samples, native_sample_rate(), sample_rate)


@lru_cache(maxsize=2)
def _babble_tracks(config: SyntheticCorpusConfig, talkers: int = 4) -> tuple[np.ndarray, ...]:
    """Unit-RMS tracks of eSpeak chatter (other voices, same grammar), each max_duration + 5 s."""
    rng = np.random.default_rng([config.seed, 3])
    length = int((config.max_duration + 5.0) * config.sample_rate)
    tracks = []
    for _ in range(talkers):
        voice, pieces = f"en+{_pick(rng, EN_VARIANTS)}", [np.zeros(0)]
        while sum(len(p) for p in pieces) < length:
            pieces.append(
                _speak(
                    " ".join(_sentence(rng, False)),
                    voice,
                    int(rng.integers(140, 200)),
                    int(rng.integers(25, 75)),
                    50,
                    int(rng.integers(1, 2**31 - 1)),
                    config.sample_rate,
                )
            )
        track = np.concatenate(pieces)[:length]
        tracks.append(track / (np.sqrt(np.mean(track**2)) + 1e-12))
    return tuple(tracks)


def babble(config: SyntheticCorpusConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` samples of babble: random segments of every chatter track, summed."""
    out = np.zeros(n)
    for track in _babble_tracks(config):
        start = int(rng.integers(0, len(track) - n + 1))
        out += track[start : start + n]
    return out


def render(plan: UtterancePlan, config: SyntheticCorpusConfig) -> tuple[np.ndarray, str]:
    """Synthesise one planned utterance: (int16 samples at ``config.sample_rate``, transcript).

    English words are dropped from the end until the audio fits ``config.max_duration``.
    """
    sr, spk, ses = config.sample_rate, plan.speaker, plan.session
    quantum = sr // gcd(sr, 10000)  # pad to this many samples: durations are exact in 4 decimals
    words = list(plan.words)
    while True:
        parts = [(" ".join(words), spk.voice)]
        if plan.spanish:
            spanish = (" ".join(plan.spanish), spk.spanish_voice)
            parts = [spanish, parts[0]] if plan.spanish_first else [parts[0], spanish]
        audio = np.concatenate(
            [
                _speak(text, voice, ses.rate, ses.pitch, spk.pitch_range, plan.synth_seed, sr)
                for text, voice in parts
            ]
        )
        audio = np.pad(audio, (0, -len(audio) % quantum))
        seconds = len(audio) / sr
        if seconds <= config.max_duration:
            break
        if len(words) <= 1:
            raise RuntimeError(f"{plan.utt_id}: one word lasts {seconds:.1f} s > max_duration")
        keep = int(len(words) * config.max_duration / seconds * 0.97)
        words = words[: max(1, min(keep, len(words) - 1))]
    audio *= 10.0 ** (ses.gain_db / 20.0)
    if plan.condition == "noisy":
        rng = np.random.default_rng([config.seed, 2, plan.synth_seed])
        noise = (
            babble(config, rng, len(audio))
            if plan.noise_kind == "babble"
            else coloured_noise(rng, len(audio), sr, 1.0 if plan.noise_kind == "pink" else 2.0)
        )
        audio = mix_at_snr(audio, noise, plan.snr_db)
    peak = float(np.max(np.abs(audio), initial=0.0))
    if peak > 32000.0:
        audio *= 32000.0 / peak
    return np.round(audio).astype(np.int16), " ".join(text for text, _ in parts)


def generate_corpus(
    out_dir: Pathlike, config: SyntheticCorpusConfig = SyntheticCorpusConfig()
) -> dict[str, Path]:
    """Render the corpus into ``out_dir``; returns {"train"|"dev"|"test": manifest path}.

    Each manifest line: audio_filepath (relative to the manifest), duration, text, speaker,
    session, condition, has_entity, code_switch, utt_id. Files already holding the same bytes are
    left untouched; stale WAVs from other configs are not removed.
    """
    start = time.perf_counter()
    out = Path(out_dir)
    lines: dict[str, list[str]] = {split: [] for split in SPLITS}
    total: Seconds = 0.0
    plans = plan_utterances(config)
    for plan in plans:
        samples, text = render(plan, config)
        rel = f"audio/{plan.utt_id}.wav"
        with atomic_output(out / rel) as tmp:
            sf.write(tmp, samples, config.sample_rate, subtype="PCM_16", format="WAV")
        duration = round(len(samples) / config.sample_rate, 4)
        total += duration
        record = {
            "audio_filepath": rel,
            "duration": duration,
            "text": text,
            "speaker": plan.speaker.speaker,
            "session": plan.session.session,
            "condition": plan.condition,
            "has_entity": any(w in vocabulary.NAMES for w in text.split()),
            "code_switch": plan.code_switch,
            "utt_id": plan.utt_id,
        }
        lines[plan.split].append(json.dumps(record, ensure_ascii=False) + "\n")
    manifests = {split: out / f"{split}.jsonl" for split in SPLITS}
    for split, path in manifests.items():
        write_text(path, "".join(lines[split]))
    logger.info(
        "synthetic corpus: %d utterances (%s), %.2f h of audio, in %.1f s -> %s",
        len(plans),
        ", ".join(f"{s} {len(lines[s])}" for s in SPLITS),
        total / 3600.0,
        time.perf_counter() - start,
        out,
    )
    return manifests
