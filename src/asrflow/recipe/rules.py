"""The rules of ``recipe: auto``: small pure functions from corpus statistics to recipe values.

Each rule returns :class:`Choice` values (a dotted recipe key, its value, and the reason in
words, with the statistic it read) and says in its docstring what it rests on: a measurement of
this project (the issue notes and ``docs/real-speech.md`` hold them), a peer recipe, or
published guidance. :func:`choices` applies them all in order; :mod:`asrflow.recipe.plan` turns
them into a plan. Bump :data:`RULES_VERSION` with any change of a rule's output, so that every
plan is made again (and only the runs whose values changed retrain).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from asrflow.recipe.stats import CorpusStats

RULES_VERSION = 4


@dataclass(frozen=True)
class Choice:
    """One derived recipe value."""

    key: str
    """Dotted recipe key, e.g. ``trainer.max_steps`` or ``frontend_conf.fs``."""
    value: Any
    reason: str


def sampling_rate(stats: CorpusStats) -> tuple[int, str]:
    """The frontend's rate: the rate that holds the most train audio, so that no audio is
    silently up-sampled (8 kHz audio at a 16 kHz frontend leaves half the mel bins without
    signal: measured on fsdd4 in the issue that made this rule). Audio at other rates is
    resampled to it when loaded; the reason says how much."""
    if not stats.rate_seconds:
        return 16000, "no train audio: 16 kHz"
    rate = max(stats.rate_seconds, key=lambda r: (stats.rate_seconds[r], r))
    total = sum(stats.rate_seconds.values())
    others = {r: s for r, s in stats.rate_seconds.items() if r != rate}
    if not others:
        return rate, f"every train utterance is at {_khz(rate)}"
    share = sum(others.values()) / total
    rest = ", ".join(f"{_khz(r)} {s / total:.0%}" for r, s in sorted(others.items()))
    return rate, (
        f"{_khz(rate)} holds {1 - share:.0%} of the train audio; the rest ({rest}) is "
        f"resampled to {_khz(rate)} when loaded"
    )


def frontend(stats: CorpusStats) -> list[Choice]:
    """Log-mel features at the corpus's rate: 25-ms windows every 10 ms (ESPnet's and Kaldi's
    default), the FFT the next power of two; 80 mel bins at 16 kHz (ESPnet's LibriSpeech
    conformer), scaled down with the bandwidth below it (40 at 8 kHz; Kaldi's narrowband
    setups use 23-40) so that no bin is narrower than at 16 kHz."""
    rate, why = sampling_rate(stats)
    win = round(0.025 * rate)
    hop = round(0.010 * rate)
    n_fft = 1 << (win - 1).bit_length()
    n_mels = max(23, min(80, round(80 * rate / 16000)))
    return [
        Choice("frontend_conf.fs", rate, why),
        Choice("frontend_conf.win_length", win, f"25 ms at {_khz(rate)}"),
        Choice("frontend_conf.hop_length", hop, f"10 ms at {_khz(rate)}"),
        Choice("frontend_conf.n_fft", n_fft, f"the power of two >= the {win}-sample window"),
        Choice("frontend_conf.n_mels", n_mels, f"80 bins per 8 kHz of bandwidth, {_khz(rate)}"),
    ]


MILD_BELOW_HOURS = 2.0
"""Below this many train hours the frequency masks are mild (a fifth of the bins each)."""


def augmentation(stats: CorpusStats, n_mels: int) -> list[Choice]:
    """SpecAugment and 3-way speed perturbation for real speech (Park et al. 2019; Ko et al.
    2015; on in ESPnet's and icefall's LibriSpeech recipes); off for synthetic speech, which
    underfits in a short budget (demo_conformer's measurement: dev WER 30.8 % without
    SpecAugment, 33.7 % with). Masks after ESPnet's LibriSpeech conformer: 2 frequency masks of
    up to 27 of 80 bins, time masks of up to 5 % of the utterance, 2 of them for utterances
    under 5 s (5 above, as ESPnet's). Below :data:`MILD_BELOW_HOURS` each frequency mask is at
    most a fifth of the bins (8 of 40): on fsdd4 (0.24 h, 8 kHz) a 4-block model with masks of
    up to 14 of 40 bins still emitted one fixed string after 1,000 steps, a 2-block one with
    masks of up to 8 reached 1.7 % dev WER in 2,000 (real-speech issue note)."""
    if stats.synthetic:
        why = "synthetic speech: underfits in a short budget (demo_conformer measured it)"
        return [Choice("specaug", None, why), Choice("augmentation.speed_perturb", [], why)]
    real = f"real speech, {stats.hours:.2f} h"
    masks = 2 if stats.median_duration < 5 else 5
    mild = stats.hours < MILD_BELOW_HOURS
    width = max(4, round((0.2 if mild else 27 / 80) * n_mels))
    which = "mild: below" if mild else "ESPnet's LibriSpeech: from"
    conf = {
        "apply_time_warp": False,
        "apply_freq_mask": True,
        "freq_mask_width_range": [0, width],
        "num_freq_mask": 2,
        "apply_time_mask": True,
        "time_mask_width_ratio_range": [0.0, 0.05],
        "num_time_mask": masks,
    }
    return [
        Choice("specaug", "specaug", real),
        Choice(
            "specaug_conf",
            conf,
            f"2 x <= {width} of {n_mels} bins ({which} {MILD_BELOW_HOURS:g} h), {masks} x "
            f"<= 5 % of the time (median utterance {stats.median_duration:.1f} s)",
        ),
        Choice("augmentation.speed_perturb", [0.9, 1.0, 1.1], f"{real}: 3 speeds"),
    ]


MODEL_TIERS = (
    # (up to hours, output_size, num_blocks, linear_units, kernel, peak lr, warmup, batch s)
    (2.0, 96, 2, 384, 15, 5.0e-3, 0.05, 20.0),
    (20.0, 144, 8, 576, 15, 2.0e-3, 0.02, 60.0),
    (200.0, 256, 12, 1024, 31, 2.0e-3, 0.02, 500.0),
    (math.inf, 512, 12, 2048, 31, 1.0e-3, 0.02, 1000.0),
)
"""The conformer by train hours. Up to 2 h: demo_conformer's model and schedule (96 x 2, 0.72 M
parameters, peak LR 5e-3 after 5 % warmup, 20-s updates), measured on the demo (its recipe's
comments) and on fsdd4 (1.7 % dev WER after 2,000 steps of ~0.1 s on 2 cores; a 4-block model
at LR 2e-3 and 2 % warmup had not left the blank plateau after 1,000: the real-speech issue
note). Up to 20 h ESPnet's small conformers' 144 dims; up to 200 h ESPnet's LibriSpeech-100
conformer (256 x 12, peak LR 2e-3, the a100 recipe); above, its LibriSpeech-960 width (512, LR
1e-3). From 2 h warmup is 2 % of the steps (the vendor guidance our users follow: 1-2 %; not
measured here), and ESPnet's LibriSpeech batch sizes (500-1000 s per update)."""


def model(stats: CorpusStats) -> list[Choice]:
    """The encoder's size, the peak LR and the audio per update, by train hours
    (:data:`MODEL_TIERS`). CTC-only: every default decoding mode reads the CTC head."""
    tier_row = next(row for row in MODEL_TIERS if stats.hours <= row[0])
    up_to, dims, blocks, units, kernel, lr, warmup, batch = tier_row
    tier = f"{stats.hours:.2f} h of train audio (tier <= {up_to:g} h)"
    return [
        Choice("encoder_conf.output_size", dims, tier),
        Choice("encoder_conf.num_blocks", blocks, tier),
        Choice("encoder_conf.linear_units", units, f"4 x {dims}"),
        Choice("encoder_conf.cnn_module_kernel", kernel, tier),
        Choice("optim.lr", lr, tier),
        Choice("scheduler.warmup", warmup, f"{warmup:.0%} of the steps: {tier}"),
        Choice("batching.max_duration", batch, f"{tier}; seconds per device and step"),
    ]


EPOCHS = 20
"""Epochs over the train set, its speed-perturbed copies included. On fsdd4 (0.24 h x 3 speeds,
20-s steps) the 2-block model's dev WER was 4.4 % after 1,000 steps (7 epochs) and 1.7 % after
2,000 (14): 20 leave room for a harder corpus. ESPnet's LibriSpeech conformers train 35-70."""
MIN_STEPS = 2000
MAX_STEPS = 200_000


def budget(stats: CorpusStats, batch_seconds: float, speeds: int) -> list[Choice]:
    """The update budget in optimizer steps: :data:`EPOCHS` over the train set (each of
    ``speeds`` copies once per epoch) at ``batch_seconds`` per step, at least
    :data:`MIN_STEPS` (a tiny corpus still needs the updates to learn; the demo's 2400 steps
    learned the demo), at most :data:`MAX_STEPS`; validated 8 times."""
    seconds = stats.hours * 3600 * max(1, speeds)
    wanted = math.ceil(EPOCHS * seconds / batch_seconds) if batch_seconds else MIN_STEPS
    steps = min(MAX_STEPS, max(MIN_STEPS, wanted))
    steps = int(math.ceil(steps / 100) * 100)
    how = f"{EPOCHS} epochs x {stats.hours:.2f} h x {max(1, speeds)} speeds / {batch_seconds:g} s"
    if wanted < MIN_STEPS:
        why = f"{how} = {wanted} steps, raised to the floor {MIN_STEPS}"
    elif wanted > MAX_STEPS:
        why = f"{how} = {wanted} steps, cut to the ceiling {MAX_STEPS}"
    else:
        why = f"{how} = {wanted} steps, rounded up to 100"
    interval = max(1, steps // 8)
    return [
        Choice("trainer.max_steps", steps, why),
        Choice("trainer.val_check_interval", interval, "8 validations over the run"),
    ]


FINE_TUNING = (
    # (up to target hours, share of the parent's peak for a first fine-tune of a model asrflow
    # trained from scratch, the vendor's LR for a model of unknown peak)
    (20.0, 1 / 3, 3.0e-5),
    (math.inf, 1 / 3, 1.0e-4),
)
"""The peak LR of a first fine-tuning run: a share of its parent's peak LR where the parent is a
run of this config (its peak is in its train summary), else the absolute value of NVIDIA's
fine-tuning guidance that our users follow (NeMo/Riva: 1e-4 for large or mixed runs, 3e-5 below
~20 h of target audio, ~1e-5 or below for a second refinement), written for models pretrained
at a peak near 1e-3.

The share was the guidance's ratio (1/30 of the peak below 20 h, 1/10 above) until measured on
asrflow's own models (bench/weekly_loop.py, docs/fine-tuning.md: fsdd4, a base of two
speakers, a child that adds a third with a rehearsal of the first two, three seeds each, two
splits of the speakers). Held-out speaker WER, 1/3 against 1/30 of the base's peak: nicolas
22.5 % against 24.7 % (1/3 ahead in every seed), george 26.0 % against 26.0 % (1/3 ahead in two
seeds of three); 1.1 points ahead on average over the six pairs. With a new vocabulary 1/3 was
far ahead (:data:`NEW_VOCABULARY_SHARE`). From 20 h it is not measured; it is the same share
rather than the guidance's smaller 1/10, since the guidance itself gives more target audio a
higher LR, not a lower one."""
REFINEMENT_SHARE = 1 / 100
REFINEMENT_LR = 1.0e-5
"""A parent that was itself fine-tuned: the guidance's ~1e-5, a hundredth of the first peak."""
NEW_VOCABULARY_SHARE = 1 / 3
NEW_VOCABULARY_LR = 3.0e-4
"""A run whose tokenizer is not its starting package's: its output layers start fresh and must
be learned, not nudged. Measured (bench/fine_tuning.py --lr-shares 10,3,1, docs/fine-tuning.md:
demo base, fsdd4 nicolas fold, one seed): at 1/30 of the base's peak, full fine-tuning reached
31.8 % on the held-out speaker (scratch 24.6 %) and LoRA 58.8 %; at 1/10, 1/3 and 1/1 full
21.2-23.0 %, LoRA 48.2, 33.6 and 31.2 %; over three seeds full at 1/3 22.0 % (19.4-25.4),
scratch 21.5 % (18.0-24.6). 1/3 is the middle of the full fine-tune's plateau and near LoRA's
best; where the parent's peak is not known, 1/3 of the guidance's ~1e-3."""
FINE_TUNING_WARMUP = 0.10
"""Warmup of a fine-tuning run, as a share of its steps: longer than from scratch (2-5 %), so
that the fresh optimizer's first, badly scaled updates do not undo the pretrained weights
(Hugging Face's Whisper fine-tuning guide: 500 warmup steps of 5,000). Not measured here."""


def fine_tuning(stats: CorpusStats, lineage: Mapping[str, Any]) -> list[Choice]:
    """The peak LR and warmup of a run that starts from another model (:data:`FINE_TUNING`,
    :data:`REFINEMENT_SHARE`, :data:`FINE_TUNING_WARMUP`). ``lineage``: ``generation`` (0: the
    parent trained from scratch; 1 or more: it was itself fine-tuned), ``parent`` (its name),
    ``parent_lr`` (its peak LR, or None when not known) and ``new_vocabulary`` (True when
    the run's tokenizer is not the package's: :data:`NEW_VOCABULARY_SHARE` wins)."""
    parent = lineage.get("parent") or "the starting model"
    parent_lr = lineage.get("parent_lr")
    if lineage.get("new_vocabulary"):
        share, absolute = NEW_VOCABULARY_SHARE, NEW_VOCABULARY_LR
        why = "a new vocabulary (the output layers start fresh)"
    elif lineage.get("generation", 0) >= 1:
        share, absolute = REFINEMENT_SHARE, REFINEMENT_LR
        why = f"a second refinement ({parent} was itself fine-tuned)"
    else:
        up_to, share, absolute = next(row for row in FINE_TUNING if stats.hours <= row[0])
        why = f"fine-tuning on {stats.hours:.2f} h ({'<' if up_to < math.inf else '>='} 20 h)"
    if parent_lr:
        lr = float(f"{parent_lr * share:.3g}")
        reason = f"{why}: 1/{round(1 / share)} of {parent}'s peak {parent_lr:g}"
    else:
        lr = absolute
        reason = f"{why}: the guidance's {absolute:g} ({parent}'s peak LR is not known)"
    return [
        Choice("optim.lr", lr, reason),
        Choice("scheduler.warmup", FINE_TUNING_WARMUP, f"{FINE_TUNING_WARMUP:.0%}: {why}"),
    ]


def choices(stats: CorpusStats, lineage: Mapping[str, Any] | None = None) -> list[Choice]:
    """Every rule's choices for a run whose train split has ``stats``; ``lineage`` (a run that
    starts from another model, :func:`fine_tuning`) replaces the LR and warmup of the size
    tier."""
    out = frontend(stats)
    n_mels = next(c.value for c in out if c.key == "frontend_conf.n_mels")
    aug = augmentation(stats, n_mels)
    out += aug
    sizes = model(stats)
    if lineage is not None:
        tuned = {c.key: c for c in fine_tuning(stats, lineage)}
        sizes = [tuned.get(c.key, c) for c in sizes]
    out += sizes
    batch = next(c.value for c in sizes if c.key == "batching.max_duration")
    speeds = len(next(c.value for c in aug if c.key == "augmentation.speed_perturb"))
    out += budget(stats, batch, speeds)
    return out


def _khz(rate: int) -> str:
    return f"{rate / 1000:g} kHz"
