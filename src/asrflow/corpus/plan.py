"""The plan of the synthetic demo corpus (:mod:`asrflow.corpus.synthetic` renders it): the corpus
config, the speakers (eSpeak voices, pitch, rate, sessions and a speaker-disjoint split) and every
utterance (text from the templated grammar of :mod:`asrflow.corpus.vocabulary`, slices, noise),
all decided from the seed without synthesising anything.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields
from types import UnionType

import numpy as np

from asrflow.corpus import vocabulary
from asrflow.settings import schema_defaults

SPLITS = ("train", "dev", "test")
EN_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4")
NOISE_KINDS = ("pink", "brown", "babble")
MAX_SPEAKERS = 3 * len(EN_VARIANTS)

_WORDS_PER_SECOND_PER_WPM = 1.3 / 60  # eSpeak speaks these short words faster than its nominal wpm


_DEFAULT = schema_defaults("corpora.*.synthetic")


@dataclass(frozen=True)
class SyntheticCorpusConfig:
    """How to build the synthetic corpus (every field may come from a YAML mapping).

    - ``num_utterances``: total utterances over all splits (>= ``num_speakers``).
    - ``seed``: everything (texts, speakers, noise, eSpeak's noise) derives from it (>= 0).
    - ``sample_rate``: output rate in Hz (eSpeak speaks at 22050 Hz; audio is resampled).
    - ``num_speakers``: speakers, each an English eSpeak voice variant with its own pitch, pitch
      range and rate (and the Spanish voice of the same variant); at most ``MAX_SPEAKERS``.
    - ``sessions_per_speaker``: recording sessions per speaker (rate/pitch/gain shift a little).
    - ``dev_speakers`` / ``test_speakers``: speakers held out for dev / test; the rest train.
      Held-out speakers share their voice variant with a training speaker where the speaker
      count allows (:func:`held_out_speakers`).
    - ``noisy_fraction``: share of utterances (per split) with ``condition == "noisy"``.
    - ``snr_db``: (low, high) SNR range in dB for noisy utterances, drawn uniformly.
    - ``entity_fraction``: share of utterances containing a person name (``has_entity``).
    - ``code_switch_fraction``: share of English + Spanish utterances (``code_switch``).
    - ``long_fraction``: share of long utterances (several sentences, about 15 s up to
      ``max_duration``); the rest have mostly 1-12 words.
    - ``max_duration``: no utterance is longer (seconds); long texts are cut to fit.
    """

    num_utterances: int = _DEFAULT["num_utterances"]
    seed: int = _DEFAULT["seed"]
    sample_rate: int = 16000  # not a config key: the demo's audio is 16 kHz
    num_speakers: int = _DEFAULT["num_speakers"]
    sessions_per_speaker: int = _DEFAULT["sessions_per_speaker"]
    dev_speakers: int = _DEFAULT["dev_speakers"]
    test_speakers: int = _DEFAULT["test_speakers"]
    noisy_fraction: float = _DEFAULT["noisy_fraction"]
    snr_db: tuple[float, float] = _DEFAULT["snr_db"]
    entity_fraction: float = _DEFAULT["entity_fraction"]
    code_switch_fraction: float = _DEFAULT["code_switch_fraction"]
    long_fraction: float = _DEFAULT["long_fraction"]
    max_duration: float = _DEFAULT["max_duration"]

    def __post_init__(self) -> None:
        def is_number(value: object, kind: type | UnionType = int | float) -> bool:
            return isinstance(value, kind) and not isinstance(value, bool)

        snr = self.snr_db
        kinds = {
            f.name: int if type(f.default) is int else int | float
            for f in fields(self)
            if type(f.default) in (int, float)
        }
        wrong = [n for n, kind in kinds.items() if not is_number(getattr(self, n), kind)]
        if not (isinstance(snr, list | tuple) and len(snr) == 2 and all(map(is_number, snr))):
            wrong.append("snr_db")
        if wrong:
            raise ValueError(
                f"SyntheticCorpusConfig: wrong type for "
                f"{', '.join(f'{n}={getattr(self, n)!r}' for n in wrong)} (counts must "
                f"be integers, fractions and seconds numbers, snr_db [low, high])"
            )
        for name, kind in kinds.items():
            if kind is not int:
                object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "snr_db", (float(snr[0]), float(snr[1])))
        held_out = self.dev_speakers + self.test_speakers
        fractions = {
            n: getattr(self, n)
            for n in ("noisy_fraction", "entity_fraction", "code_switch_fraction", "long_fraction")
        }
        checks = (
            (self.seed >= 0, f"seed must be >= 0, got {self.seed}"),
            (self.snr_db[0] <= self.snr_db[1], f"snr_db must be [low, high], got {self.snr_db}"),
            (8000 <= self.sample_rate <= 48000, f"sample_rate {self.sample_rate} not in 8k..48k"),
            (1 <= self.sessions_per_speaker <= 9, "sessions_per_speaker must be in 1..9"),
            (min(self.dev_speakers, self.test_speakers) >= 1, "dev/test_speakers must be >= 1"),
            (
                held_out < self.num_speakers <= MAX_SPEAKERS,
                f"num_speakers {self.num_speakers} not in {held_out + 1}..{MAX_SPEAKERS}",
            ),
            (
                self.num_utterances >= self.num_speakers,
                f"num_utterances ({self.num_utterances}) must be >= num_speakers",
            ),
            (all(0.0 <= v <= 1.0 for v in fractions.values()), f"not in [0, 1]: {fractions}"),
            (
                self.code_switch_fraction + self.long_fraction <= 1.0,
                "code_switch_fraction + long_fraction must be <= 1",
            ),
            (5.0 <= self.max_duration <= 120.0, f"max_duration {self.max_duration} not in 5..120"),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(f"SyntheticCorpusConfig: {message}")


@dataclass(frozen=True)
class Session:
    """One recording session of a speaker: its id and voice settings."""

    session: str
    rate: int
    pitch: int
    gain_db: float


@dataclass(frozen=True)
class SpeakerPlan:
    """A synthetic speaker: eSpeak voices, pitch range, split and sessions."""

    speaker: str
    voice: str
    spanish_voice: str
    pitch_range: int
    split: str
    sessions: tuple[Session, ...]


@dataclass(frozen=True)
class UtterancePlan:
    """Everything needed to render one utterance; ``words`` are English, ``spanish`` Spanish."""

    utt_id: str
    speaker: SpeakerPlan
    session: Session
    words: tuple[str, ...]
    spanish: tuple[str, ...]
    spanish_first: bool
    is_long: bool
    condition: str
    snr_db: float
    noise_kind: str
    synth_seed: int

    @property
    def split(self) -> str:
        return self.speaker.split

    @property
    def code_switch(self) -> bool:
        return bool(self.spanish)


def _pick(rng: np.random.Generator, seq: tuple[str, ...]) -> str:
    return seq[int(rng.integers(len(seq)))]


def held_out_speakers(
    variant_of: list[str], order: list[int], dev: int, test: int
) -> dict[int, str]:
    """Speaker index -> ``dev``/``test`` for the held-out speakers, taken in ``order``.

    A held-out speaker is preferably one whose voice variant another *training* speaker keeps:
    an unseen speaker of a familiar voice family, as a new speaker in a real corpus shares an
    accent with many training speakers. With eSpeak's 11 variants, a held-out variant is a new
    vocal tract that 10 training voices cannot teach (measured: a model at 1 % WER on its
    training voices scored 22 % on clean speech of an unseen variant and 15 % on seen variants
    at new pitches and rates). Only when too few variants are shared (small corpora) are
    speakers of unseen variants held out too.
    """
    train_count = Counter(variant_of)
    held: list[int] = []
    for k in order:
        if len(held) == dev + test:
            break
        if train_count[variant_of[k]] >= 2:
            held.append(k)
            train_count[variant_of[k]] -= 1
    held += [k for k in order if k not in held][: dev + test - len(held)]
    return {k: ("dev" if i < dev else "test") for i, k in enumerate(held)}


def plan_speakers(config: SyntheticCorpusConfig) -> list[SpeakerPlan]:
    """Speakers with distinct voice/pitch/rate, their sessions, and a speaker-disjoint split."""
    rng = np.random.default_rng([config.seed, 0])
    variants = [EN_VARIANTS[i] for i in rng.permutation(len(EN_VARIANTS))]
    order = [int(k) for k in rng.permutation(config.num_speakers)]
    variant_of = [variants[k % len(variants)] for k in range(config.num_speakers)]
    split_of = held_out_speakers(variant_of, order, config.dev_speakers, config.test_speakers)
    speakers = []
    for k in range(config.num_speakers):
        variant = variant_of[k]
        pitch = (35, 55, 25)[k // len(variants)] + int(rng.integers(0, 16))  # same variant: apart
        rate = int(rng.integers(145, 196))
        sessions = tuple(
            Session(
                session=f"spk{k:02d}_s{s + 1}",
                rate=int(np.clip(rate + rng.integers(-12, 13), 130, 210)),
                pitch=int(np.clip(pitch + rng.integers(-4, 5), 20, 80)),
                gain_db=round(float(rng.uniform(-6.0, 0.0)), 2),
            )
            for s in range(config.sessions_per_speaker)
        )
        speakers.append(
            SpeakerPlan(
                speaker=f"spk{k:02d}",
                voice=f"en+{variant}",
                spanish_voice=f"es+{variant}",
                pitch_range=int(rng.integers(35, 76)),
                split=split_of.get(k, "train"),
                sessions=sessions,
            )
        )
    return speakers


def _sentence(rng: np.random.Generator, entity: bool, min_words: int = 1) -> list[str]:
    """One English sentence from the grammar; it names a person iff ``entity``."""
    while True:
        template = _pick(rng, vocabulary.ENTITY_TEMPLATES if entity else vocabulary.PLAIN_TEMPLATES)
        name, verb, noun = (
            _pick(rng, vocabulary.NAMES),
            _pick(rng, tuple(vocabulary.VERBS)),
            _pick(rng, vocabulary.NOUNS),
        )
        words = template.format(
            who=name if entity else _pick(rng, vocabulary.PEOPLE),
            name=name,
            verb=verb,
            verbed=vocabulary.VERBS[verb],
            noun=noun,
            noun2=_pick(rng, vocabulary.NOUNS),
            nouns=noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s"),
            adj=_pick(rng, vocabulary.ADJECTIVES),
            adj2=_pick(rng, vocabulary.ADJECTIVES),
            place=_pick(rng, vocabulary.PLACES),
            past=_pick(rng, vocabulary.PAST),
            future=_pick(rng, vocabulary.FUTURE),
            num=_pick(rng, vocabulary.NUMBERS),
            hour=_pick(rng, vocabulary.HOURS),
            dir=_pick(rng, ("left", "right")),
            short=_pick(rng, vocabulary.SHORT),
        ).split()
        if len(words) >= min_words:
            return words


def _exact_subset(rng: np.random.Generator, items: list[int], count: float) -> set[int]:
    """``round(count)`` of ``items``, chosen at random."""
    return {items[int(i)] for i in rng.permutation(len(items))[: round(count)]}


def plan_utterances(config: SyntheticCorpusConfig) -> list[UtterancePlan]:
    """The whole corpus as a plan: no audio, fully determined by ``config``."""
    speakers = plan_speakers(config)
    rng = np.random.default_rng([config.seed, 1])
    order = [speakers[int(k)] for k in rng.permutation(len(speakers))]
    owners = [order[i % len(order)] for i in range(config.num_utterances)]
    long_ids: set[int] = set()
    switch_ids: set[int] = set()
    noisy_ids: set[int] = set()
    entity_ids: set[int] = set()
    for split in SPLITS:  # slices are drawn per split, so each split gets its share
        members = [i for i, spk in enumerate(owners) if spk.split == split]
        long_ids |= _exact_subset(rng, members, config.long_fraction * len(members))
        rest = [i for i in members if i not in long_ids]
        switch_ids |= _exact_subset(rng, rest, config.code_switch_fraction * len(members))
        noisy_ids |= _exact_subset(rng, members, config.noisy_fraction * len(members))
        entity_ids |= _exact_subset(rng, members, config.entity_fraction * len(members))
    long_low = min(15.0, config.max_duration / 2)
    plans = []
    for i, spk in enumerate(owners):
        session = spk.sessions[(i // len(order)) % len(spk.sessions)]
        words = _sentence(rng, i in entity_ids)
        if i in long_ids:
            seconds = rng.uniform(long_low, config.max_duration)
            target = int(seconds * session.rate * _WORDS_PER_SECOND_PER_WPM)
            while len(words) < target:
                words += _pick(rng, vocabulary.CONNECTORS).split() + _sentence(
                    rng, False, min_words=4
                )
        while i in switch_ids and len(words) > 8:
            words = _sentence(rng, i in entity_ids)
        plans.append(
            UtterancePlan(
                utt_id=f"{session.session}_{i:05d}",
                speaker=spk,
                session=session,
                words=tuple(words),
                spanish=tuple(_pick(rng, vocabulary.SPANISH).split()) if i in switch_ids else (),
                spanish_first=bool(rng.integers(2)),
                is_long=i in long_ids,
                condition="noisy" if i in noisy_ids else "clean",
                snr_db=round(float(rng.uniform(*config.snr_db)), 2),
                noise_kind=_pick(rng, NOISE_KINDS),
                synth_seed=int(rng.integers(1, 2**31 - 1)),
            )
        )
    return plans
