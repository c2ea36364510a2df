"""asrflow.recipe.rules: what recipe auto derives from a train split's statistics, and why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from asrflow.recipe import rules
from asrflow.recipe.stats import CorpusStats, Utterance, stats_of


def corpus(hours: float = 0.3, rate: int = 8000, *, synthetic: bool = False, **kw) -> CorpusStats:
    base = CorpusStats(
        hours=hours,
        utterances=400,
        speakers=3,
        median_duration=2.5,
        rate_seconds={rate: hours * 3600},
        characters=15,
        words=10,
        running_words=2000,
        synthetic=synthetic,
    )
    return replace(base, **kw)


def values(stats: CorpusStats) -> dict:
    return {c.key: c.value for c in rules.choices(stats)}


def test_the_frontend_runs_at_the_corpus_rate_with_25_ms_windows_every_10_ms() -> None:
    v8, v16 = values(corpus(rate=8000)), values(corpus(rate=16000))
    assert (v8["frontend_conf.fs"], v8["frontend_conf.win_length"]) == (8000, 200)
    assert (v8["frontend_conf.hop_length"], v8["frontend_conf.n_fft"]) == (80, 256)
    assert (v16["frontend_conf.fs"], v16["frontend_conf.n_fft"]) == (16000, 512)
    assert (v8["frontend_conf.n_mels"], v16["frontend_conf.n_mels"]) == (40, 80)


def test_mixed_rates_take_the_rate_of_most_audio_and_say_what_is_resampled() -> None:
    stats = corpus(rate_seconds={8000: 300.0, 16000: 700.0})
    (fs,) = [c for c in rules.choices(stats) if c.key == "frontend_conf.fs"]
    assert fs.value == 16000
    assert "70%" in fs.reason and "8 kHz 30%" in fs.reason and "resampled" in fs.reason


def test_real_speech_gets_specaugment_and_speed_perturbation_synthetic_does_not() -> None:
    real, synth = values(corpus()), values(corpus(synthetic=True))
    assert real["specaug"] == "specaug" and real["augmentation.speed_perturb"] == [0.9, 1.0, 1.1]
    assert real["specaug_conf"]["freq_mask_width_range"] == [0, 8]  # mild below 2 h: 1/5
    big = values(corpus(hours=50, rate=16000))
    assert big["specaug_conf"]["freq_mask_width_range"] == [0, 27]  # ESPnet's 27 of 80
    assert synth["specaug"] is None and synth["augmentation.speed_perturb"] == []
    assert "specaug_conf" not in synth


@pytest.mark.parametrize(
    ("hours", "dims", "blocks"), [(0.3, 96, 2), (5.0, 144, 8), (100.0, 256, 12), (960.0, 512, 12)]
)
def test_the_model_grows_with_the_hours(hours: float, dims: int, blocks: int) -> None:
    v = values(corpus(hours=hours))
    assert (v["encoder_conf.output_size"], v["encoder_conf.num_blocks"]) == (dims, blocks)
    assert v["encoder_conf.linear_units"] == 4 * dims


def test_the_budget_follows_the_hours_between_a_floor_and_a_ceiling() -> None:
    tiny, mid, huge = (values(corpus(hours=h)) for h in (0.01, 1.0, 50_000.0))
    assert tiny["trainer.max_steps"] == rules.MIN_STEPS
    assert huge["trainer.max_steps"] == rules.MAX_STEPS
    # 1 h, 3 speeds, 20 s per step
    expected = rules.EPOCHS * 3600 * 3 / 20
    assert mid["trainer.max_steps"] == pytest.approx(expected, abs=100)
    for v in (tiny, mid, huge):
        assert v["trainer.val_check_interval"] * 8 <= v["trainer.max_steps"]
    assert (tiny["scheduler.warmup"], huge["scheduler.warmup"]) == (0.05, 0.02)


def test_every_choice_gives_a_reason_naming_what_it_read() -> None:
    for c in rules.choices(corpus(hours=0.32)):
        assert c.reason.strip(), c.key
    (steps,) = [c for c in rules.choices(corpus(hours=0.32)) if c.key == "trainer.max_steps"]
    assert "0.32 h" in steps.reason


def test_stats_of_counts_speakers_rates_and_text() -> None:
    s = stats_of(
        [
            Utterance(2.0, 8000, "one two", "a"),
            Utterance(4.0, 8000, "two three", "b"),
            Utterance(3.0, 16000, "three", None),
        ],
        synthetic=False,
    )
    assert s.hours == pytest.approx(9 / 3600) and s.utterances == 3 and s.speakers == 2
    assert s.median_duration == 3.0 and s.rate_seconds == {8000: 6.0, 16000: 3.0}
    assert (s.words, s.running_words) == (3, 5)
    assert s.characters == len(set("onetwothree"))
    assert CorpusStats.from_dict(s.to_dict()).rate_seconds == s.rate_seconds


@pytest.mark.parametrize(
    ("generation", "parent_lr", "lr"), [(0, 5e-3, 5e-3 / 3), (1, 5e-3, 5e-3 / 3), (0, None, 3e-4)]
)
def test_a_new_vocabulary_fine_tunes_at_a_third_of_the_parents_peak(
    generation, parent_lr, lr
) -> None:
    """Measured (bench/fine_tuning.py --lr-shares): fresh output layers need more than 1/30."""
    lineage = {"parent": "base", "generation": generation, "parent_lr": parent_lr}
    chosen = {
        c.key: c for c in rules.choices(corpus(hours=0.3), {**lineage, "new_vocabulary": True})
    }
    assert chosen["optim.lr"].value == pytest.approx(lr, rel=3e-3)
    assert "new vocabulary" in chosen["optim.lr"].reason
    assert chosen["scheduler.warmup"].value == rules.FINE_TUNING_WARMUP
    same = {c.key: c for c in rules.choices(corpus(hours=0.3), lineage)}
    if parent_lr is None or generation:  # a kept vocabulary: the guidance's 3e-5, or 1/100 of a
        assert same["optim.lr"].value < chosen["optim.lr"].value  # refined parent's peak
    else:  # a first fine-tune of a known peak: the same share (measured: the weekly loop)
        assert same["optim.lr"].value == pytest.approx(chosen["optim.lr"].value)
        assert "new vocabulary" not in same["optim.lr"].reason


@pytest.mark.parametrize(
    ("hours", "generation", "parent_lr", "lr"),
    [
        (0.3, 0, 5e-3, 5e-3 / 3),  # a parent of this config: 1/3 of its peak (measured)
        (50.0, 0, 2e-3, 2e-3 / 3),  # from 20 h too (not measured; the guidance rises with hours)
        (0.3, 1, 5e-3, 5e-5),  # a second refinement: 1/100
        (0.3, 0, None, 3e-5),  # a package from elsewhere: the guidance's absolute values
        (50.0, 0, None, 1e-4),
        (50.0, 2, None, 1e-5),
    ],
)
def test_a_fine_tuning_runs_lr_follows_the_target_hours_and_its_parents_history(
    hours, generation, parent_lr, lr
) -> None:
    lineage = {"parent": "base", "generation": generation, "parent_lr": parent_lr}
    chosen = {c.key: c for c in rules.choices(corpus(hours=hours), lineage)}
    assert chosen["optim.lr"].value == pytest.approx(lr, rel=3e-3)
    assert chosen["scheduler.warmup"].value == rules.FINE_TUNING_WARMUP
    reason = chosen["optim.lr"].reason
    assert ("second refinement" in reason) == (generation > 0)
    assert ("not known" in reason) == (parent_lr is None)
    # everything else is what the same corpus trained from scratch gets
    scratch = values(corpus(hours=hours))
    for key, c in chosen.items():
        if key not in ("optim.lr", "scheduler.warmup"):
            assert c.value == scratch[key], key
