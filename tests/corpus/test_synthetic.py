import dataclasses
import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from asrflow.corpus.plan import (
    EN_VARIANTS,
    SPLITS,
    SyntheticCorpusConfig,
    held_out_speakers,
    plan_speakers,
    plan_utterances,
)
from asrflow.corpus.synthetic import coloured_noise, generate_corpus, mix_at_snr, render
from asrflow.corpus.vocabulary import NAMES

SMALL = SyntheticCorpusConfig(
    num_utterances=40, seed=5, num_speakers=12, dev_speakers=1, test_speakers=1
)
KEYS = [
    "audio_filepath",
    "duration",
    "text",
    "speaker",
    "session",
    "condition",
    "has_entity",
    "code_switch",
    "utt_id",
]
SPANISH_WORDS = {
    "gracias",
    "por",
    "favor",
    "hasta",
    "luego",
    "buenas",
    "noches",
    "tardes",
    "de",
    "nada",
    "mucho",
    "gusto",
    "con",
    "permiso",
    "vamos",
    "la",
    "playa",
    "casa",
    "es",
    "grande",
    "tengo",
    "hambre",
    "el",
    "perro",
    "bonito",
    "hola",
    "amigo",
    "nos",
    "vemos",
    "muy",
    "bien",
    "todo",
    "un",
    "momento",
    "cuenta",
    "libro",
    "rojo",
    "amigos",
    "muchas",
    "vista",
}


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def read(manifests: dict[str, Path]) -> dict[str, list[dict]]:
    return {
        split: [json.loads(line) for line in path.read_text().splitlines()]
        for split, path in manifests.items()
    }


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    out = {}
    for name, config in (("a", SMALL), ("b", SMALL), ("c", dataclasses.replace(SMALL, seed=6))):
        manifests = generate_corpus(root / name, config)
        assert manifests == {split: root / name / f"{split}.jsonl" for split in SPLITS}
        out[name] = (root / name, manifests)
    return out


def test_same_seed_gives_identical_bytes_other_seed_differs(corpora):
    a, b, c = (digests(corpora[k][0]) for k in "abc")
    assert len(a) == SMALL.num_utterances + 3
    assert a == b
    assert a["train.jsonl"] != c["train.jsonl"]
    assert not set(a.values()) & set(c.values())


def test_manifests_match_the_wavs(corpora):
    manifests = corpora["a"][1]
    rows = read(manifests)
    assert sum(len(r) for r in rows.values()) == SMALL.num_utterances
    for split, records in rows.items():
        assert records, split
        for rec in records:
            assert list(rec) == KEYS
            assert rec["audio_filepath"] == f"audio/{rec['utt_id']}.wav"
            info = sf.info(manifests[split].parent / rec["audio_filepath"])
            assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
            assert rec["duration"] == pytest.approx(info.frames / info.samplerate, abs=1e-9)
            assert 0.2 < rec["duration"] <= SMALL.max_duration
            assert re.fullmatch(r"[a-z]+( [a-z]+)*", rec["text"]), rec["text"]
            assert rec["has_entity"] == any(w in NAMES for w in rec["text"].split())
            assert rec["condition"] in ("clean", "noisy")


def test_splits_are_speaker_and_session_disjoint(corpora):
    rows = read(corpora["a"][1])
    owner: dict[str, set[str]] = defaultdict(set)
    for split, records in rows.items():
        for rec in records:
            assert rec["session"].startswith(rec["speaker"] + "_s")
            owner[rec["speaker"]].add(split)
            owner[rec["session"]].add(split)
    assert all(len(splits) == 1 for splits in owner.values())


def test_slices_are_present(corpora):
    records = [r for rows in read(corpora["a"][1]).values() for r in rows]
    assert any(r["condition"] == "noisy" for r in records)
    assert any(r["condition"] == "clean" for r in records)
    assert any(r["has_entity"] for r in records)
    switched = [r for r in records if r["code_switch"]]
    assert switched
    assert all(set(r["text"].split()) & SPANISH_WORDS for r in switched)
    assert any(r["duration"] > 12.0 for r in records)  # the long tail


def test_default_plan_speakers_and_sessions():
    speakers = plan_speakers(SyntheticCorpusConfig())
    assert len(speakers) >= 8
    assert len({(s.voice, s.sessions[0].pitch) for s in speakers}) == len(speakers)
    assert {s.split for s in speakers} == set(SPLITS)
    sessions = [ses.session for s in speakers for ses in s.sessions]
    assert len(sessions) == len(set(sessions)) == 3 * len(speakers)
    for s in speakers:
        assert s.voice.startswith("en+") and s.spanish_voice.startswith("es+")
        assert all(130 <= ses.rate <= 210 and 20 <= ses.pitch <= 80 for ses in s.sessions)
    plans = plan_utterances(SyntheticCorpusConfig())
    split_of = {}
    for p in plans:
        assert split_of.setdefault(p.session.session, p.split) == p.split
        assert p.session in p.speaker.sessions


def test_default_held_out_speakers_have_voices_training_keeps():
    speakers = plan_speakers(SyntheticCorpusConfig())
    train_voices = {s.voice for s in speakers if s.split == "train"}
    held = [s for s in speakers if s.split != "train"]
    assert sorted(s.split for s in held) == ["dev"] * 3 + ["test"] * 3
    assert all(s.voice in train_voices for s in held)
    assert len(train_voices) == len(EN_VARIANTS)
    # a held-out speaker differs from the training speakers of its variant in pitch
    for s in held:
        same = [t for t in speakers if t.voice == s.voice and t.split == "train"]
        assert all(abs(t.sessions[0].pitch - s.sessions[0].pitch) >= 5 for t in same)


def test_held_out_speakers_fall_back_to_unseen_variants_when_too_few_are_shared():
    # 4 speakers, 3 variants: only "a" has a second speaker that training keeps
    variant_of = ["a", "b", "a", "c"]
    assert held_out_speakers(variant_of, [1, 0, 2, 3], dev=1, test=1) == {0: "dev", 1: "test"}
    # speaker 0 first (its variant stays in training), then unseen variants in order
    split = held_out_speakers(variant_of, [3, 1, 0, 2], dev=2, test=1)
    assert split == {0: "dev", 3: "dev", 1: "test"}
    # never more than asked, never the last speaker of a shared variant first
    split = held_out_speakers(["a", "a", "b", "b"], [0, 1, 2, 3], dev=1, test=1)
    assert split == {0: "dev", 2: "test"}


def test_default_plan_length_distribution_and_slices():
    config = SyntheticCorpusConfig()
    plans = plan_utterances(config)
    assert len(plans) == 1500 and len({p.utt_id for p in plans}) == 1500
    words = np.array([len(p.words) + len(p.spanish) for p in plans])
    assert np.mean((words >= 1) & (words <= 12)) > 0.85
    assert np.mean(words <= 2) > 0.03  # some one- and two-word utterances
    long = [p for p in plans if p.is_long]
    assert len(long) == pytest.approx(config.long_fraction * 1500, abs=3)
    assert all(len(p.words) >= 40 for p in long)
    for split in SPLITS:
        members = [p for p in plans if p.split == split]
        noisy = sum(p.condition == "noisy" for p in members) / len(members)
        switch = sum(p.code_switch for p in members) / len(members)
        entity = sum(any(w in NAMES for w in p.words) for p in members) / len(members)
        assert noisy == pytest.approx(config.noisy_fraction, abs=0.02)
        assert switch == pytest.approx(config.code_switch_fraction, abs=0.02)
        assert entity == pytest.approx(config.entity_fraction, abs=0.02)
    vocabulary = {w for p in plans for w in p.words + p.spanish}
    assert 200 <= len(vocabulary) <= 600
    assert not any(ch.isdigit() for w in vocabulary for ch in w)
    assert plans == plan_utterances(config)


@pytest.mark.parametrize("kind", ["white", "pink", "brown"])
@pytest.mark.parametrize("snr", [5.0, 10.0, 15.0])
def test_mix_at_snr_hits_the_requested_snr(kind, snr):
    rng = np.random.default_rng(0)
    t = np.arange(32000) / 16000
    speech = 8000 * np.sin(2 * np.pi * 220 * t) * (t > 0.3)  # with leading silence
    exponent = {"white": 0.0, "pink": 1.0, "brown": 2.0}[kind]
    noise = 123.0 * coloured_noise(rng, len(speech), 16000, exponent)
    mixed = mix_at_snr(speech, noise, snr)
    measured = 10 * np.log10(np.mean(speech**2) / np.mean((mixed - speech) ** 2))
    assert measured == pytest.approx(snr, abs=1.0)
    with pytest.raises(ValueError):
        mix_at_snr(speech, noise[:-1], snr)


@pytest.mark.parametrize("kind", ["pink", "babble"])
def test_rendered_noisy_utterance_has_the_planned_snr(kind):
    plan = next(p for p in plan_utterances(SMALL) if not p.is_long and not p.code_switch)
    noisy_plan = dataclasses.replace(plan, condition="noisy", noise_kind=kind, snr_db=7.5)
    clean, text = render(dataclasses.replace(plan, condition="clean"), SMALL)
    noisy, noisy_text = render(noisy_plan, SMALL)
    assert text == noisy_text == " ".join(plan.words)
    s, y = clean.astype(np.float64), noisy.astype(np.float64)
    gain = np.dot(y, s) / np.dot(s, s)  # 1 unless the mix had to be scaled down to fit int16
    measured = 10 * np.log10(np.sum((gain * s) ** 2) / np.sum((y - gain * s) ** 2))
    assert measured == pytest.approx(7.5, abs=1.0)


def test_long_texts_are_cut_to_max_duration():
    config = dataclasses.replace(SMALL, max_duration=6.0)
    plan = next(p for p in plan_utterances(config) if not p.code_switch)
    long_plan = dataclasses.replace(plan, words=plan.words * 30, is_long=True)
    audio, text = render(long_plan, config)
    assert len(audio) / config.sample_rate <= 6.0
    assert 3 < len(text.split()) < len(long_plan.words)
    assert " ".join(long_plan.words).startswith(text)


def test_config_from_yaml_mapping_and_validation():
    mapping = yaml.safe_load("num_utterances: 100\nsnr_db: [0, 20]\nmax_duration: 20\n")
    config = SyntheticCorpusConfig(**mapping)
    assert config.snr_db == (0.0, 20.0) and isinstance(config.max_duration, float)
    hash(config)
    bad = [
        {"num_speakers": 2},
        {"num_speakers": 99},
        {"snr_db": [10, 5]},
        {"snr_db": 5},
        {"noisy_fraction": 1.5},
        {"seed": -1},
        {"seed": 1.5},
        {"num_utterances": 3},
        {"sessions_per_speaker": 0},
        {"max_duration": 1.0},
        {"dev_speakers": 0},
        {"code_switch_fraction": 0.7, "long_fraction": 0.5},
        {"sample_rate": "16k"},
    ]
    for kwargs in bad:
        with pytest.raises(ValueError, match="SyntheticCorpusConfig"):
            SyntheticCorpusConfig(**kwargs)
