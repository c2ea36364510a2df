"""Training diagnostics that catch the silent failures: spikes, blank outputs, unreadable progress.

- **Transcripts**: a fixed list of dev utterances is decoded at every validation and written to
  ``transcripts/step<N>.txt`` (reference and hypothesis side by side) so a person can read how the
  model is doing, not just a number.
- **Blank warning**: when every dev hypothesis is empty after warmup, the usual causes are a
  tokenizer/token-list mismatch or a learning rate far too low; it is logged loudly and recorded.
- **Loss spikes and suspects**: an utterance whose loss stands out from the recent ones is
  *blamed*; a batch with a blamed utterance is a spike, appended to ``spikes.jsonl``. Every
  utterance's blames and appearances are tallied over the run, and :meth:`Diagnostics.suspects`
  lists the utterances blamed more often than chance explains, worst first: a corrupt file or a
  wrong transcript is blamed again and again once the model has learnt enough, a clean one
  rarely more than once (measured on the demo: docs/training.md, "Loss spikes").

How an utterance is judged (:meth:`Diagnostics.observe_loss`). Its loss is per target token,
from the training forward itself (ESPnet's CTC computes one loss per utterance before it averages
them: :class:`~asrflow.train.loop.module.AsrModule` reads them; where it cannot, e.g. another CTC
type, the batch's loss stands for each of its utterances, and a spike blames them all). The
reference is every utterance loss of the last ``spike_window`` batches (after
:data:`MIN_HISTORY` batches). An utterance is blamed when all three hold:

1. its log loss is more than ``spike_z`` robust standard deviations above the reference's median
   log loss (median absolute deviation x 1.4826, the standard deviation of a normal
   distribution). Logs, because a loss falls by orders of magnitude over a run and its noise
   scales with it; median and MAD, because the outliers sought must not move the reference.
   3.5 is Iglewicz and Hoaglin's cut-off for their modified z-score, chosen before any
   measurement;
2. its loss is at least ``spike_factor`` x the reference median: when the losses of a stretch are
   nearly equal the MAD is tiny and (1) alone would flag a small rise;
3. its loss exceeds the median by at least ``spike_min_excess`` nats per token: a ratio to a
   near-zero median (0.1 per token late in a run) is noise, whereas a transcript whose tokens
   are wrong costs nats per token (a uniform guess over a 300-piece vocabulary is 5.7).

An utterance's tally counts the *judged* batches it was in (``appearances``) and its blames
(``spikes``); with speed perturbation the copies (``<id>_sp0.9``) count as their source
utterance. Its ``score`` is ``-log10(N * P(X >= spikes))`` for ``X ~ Binomial(appearances,
p)``, where ``p`` is the run's blamed fraction of all appearances and ``N`` the number of
utterances tallied: minus the log of how many utterances of the corpus chance alone would blame
as often (a Bonferroni bound, since someone has to take the rare blame of a clean run). A score
of 2 means one such utterance in 100 corpora; at or below 0, chance explains it. The ranking is
that of ``P`` alone.

Resume: :meth:`state_dict` (reference window, tally, spike count) is saved in every checkpoint,
and a run resumed from one continues with exactly that state; ``spikes.jsonl`` is cut back to
the spikes that state has counted (the batches trained after the checkpoint are trained, and
judged, again). A checkpoint without that state (asrflow before the tally) rebuilds the tally
from the ``spikes.jsonl`` records before its step: their utterances' blames and appearances in
spiking batches only (appearances in quiet batches were not written down), and a fresh window.

Under DDP only rank 0's batches are judged (its shard, about 1/N of every epoch: every utterance
still comes round); the other ranks keep no tally, so no per-step collective is needed.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from asrflow.io import write_text
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

MIN_HISTORY = 10
"""Batches seen before spikes are judged (the median of fewer is noise)."""

MAD_TO_SD = 1.4826
"""Median absolute deviation -> standard deviation of a normal distribution."""

LOSS_FLOOR = 1e-6
"""Losses are clamped here before their log (a CTC loss of 0 is an infeasible alignment that
``zero_infinity`` zeroed, never a perfect fit)."""

SUSPECTS_LISTED = 20
"""How many suspects the train summary lists."""

SPIKES_FILE = "spikes.jsonl"


@dataclass
class Tally:
    """One utterance over the run: judged batches it was in, its blames, its worst ratio."""

    appearances: int = 0
    spikes: int = 0
    max_factor: float = 0.0


def binomial_surprise(k: int, n: int, p: float) -> float:
    """``-log10 P(X >= k)`` for ``X ~ Binomial(n, p)``; 0 when ``k <= 0``.

    >>> round(binomial_surprise(1, 10, 0.01), 2)  # one blame in ten appearances at a 1 % rate
    1.02
    """
    if k <= 0 or p >= 1.0:
        return 0.0
    if p <= 0.0:
        return math.inf
    n = max(n, k)
    terms = [
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * math.log(p)
        + (n - i) * math.log1p(-p)
        for i in range(k, n + 1)
    ]
    top = max(terms)
    log_tail = top + math.log(sum(math.exp(t - top) for t in terms))
    return max(0.0, -log_tail / math.log(10))


def robust_center(logs: Sequence[float]) -> tuple[float, float]:
    """Median and MAD-based standard deviation of ``logs``."""
    ordered = sorted(logs)
    median = _median(ordered)
    spread = MAD_TO_SD * _median(sorted(abs(x - median) for x in ordered))
    return median, spread


def _plain(value: Any) -> Any:
    """A float rounded for spikes.jsonl, None for an infinite one (strict JSON)."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    return value


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


class Diagnostics:
    """Collects the diagnostics of one training run under ``out_dir``.

    ``speed_factors``: the recipe's ``augmentation.speed_perturb``, so that the tally counts a
    perturbed copy as its source utterance. ``write_spikes``: False on a process that must not
    touch ``spikes.jsonl`` (a DDP rank other than 0 restoring a checkpoint).
    """

    def __init__(
        self,
        out_dir: Pathlike,
        decode_ids: Sequence[str],
        *,
        spike_factor: float = 5.0,
        spike_window: int = 50,
        spike_z: float = 3.5,
        spike_min_excess: float = 1.0,
        speed_factors: Sequence[float] = (),
        warmup_steps: int = 0,
        blank_warning: bool = True,
        write_spikes: bool = True,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.decode_ids = list(decode_ids)
        self.spike_factor = spike_factor
        self.spike_z = spike_z
        self.spike_min_excess = spike_min_excess
        self.history: deque[list[float]] = deque(maxlen=spike_window)
        self.suffixes = tuple(f"_sp{f}" for f in speed_factors if f != 1.0)
        self.warmup_steps = warmup_steps
        self.blank_warning = blank_warning
        self.write_spikes = write_spikes
        self.warnings: list[str] = []
        self.num_spikes = 0
        self.tally: dict[str, Tally] = {}
        (self.out_dir / "transcripts").mkdir(parents=True, exist_ok=True)

    @property
    def spikes_path(self) -> Path:
        return self.out_dir / SPIKES_FILE

    def source_id(self, utt: str) -> str:
        """The utterance a speed-perturbed copy was made from (``u_sp0.9`` -> ``u``)."""
        for suffix in self.suffixes:
            if utt.endswith(suffix):
                return utt[: -len(suffix)]
        return utt

    # --- spikes ------------------------------------------------------------------------------

    def observe_loss(
        self,
        step: int,
        loss_per_token: float,
        ids: Sequence[str],
        utterance_losses: Sequence[float] | None = None,
    ) -> bool:
        """Judge one batch; returns True (and records it) when it is a spike.

        ``loss_per_token``: the batch's loss per target token; ``utterance_losses``: each
        utterance's loss per target token, in the order of ``ids`` (None: judge the batch's
        loss, standing for every utterance of it).
        """
        per_utt = utterance_losses is not None and len(utterance_losses) == len(ids)
        values = [float(v) for v in utterance_losses] if per_utt else [float(loss_per_token)]
        logs = [math.log(max(v, LOSS_FLOOR)) if math.isfinite(v) else math.inf for v in values]
        spike = False
        if len(self.history) >= MIN_HISTORY:
            spike = self._judge(step, loss_per_token, ids, values, logs, per_utt)
        self.history.append([x for x in logs if math.isfinite(x)])
        return spike

    def _judge(
        self,
        step: int,
        loss_per_token: float,
        ids: Sequence[str],
        values: Sequence[float],
        logs: Sequence[float],
        per_utt: bool,
    ) -> bool:
        center, spread = robust_center(list(chain.from_iterable(self.history)))
        median = math.exp(center)
        blamed = []
        for k, (value, x) in enumerate(zip(values, logs, strict=True)):
            z = (x - center) / spread if spread > 0 else (math.inf if x > center else 0.0)
            if (
                z > self.spike_z
                and value >= self.spike_factor * median
                and value - median >= self.spike_min_excess
            ):
                who = [ids[k]] if per_utt else list(ids)
                blamed += [
                    {"id": u, "loss_per_token": value, "factor": value / median, "z": z}
                    for u in who
                ]
        for utt in dict.fromkeys(self.source_id(u) for u in ids):
            self.tally.setdefault(utt, Tally()).appearances += 1
        if not blamed:
            return False
        worst: dict[str, float] = {}  # one blame per source utterance and batch
        for b in blamed:
            src = self.source_id(b["id"])
            worst[src] = max(worst.get(src, 0.0), b["factor"])
        for src, factor in worst.items():
            entry = self.tally[src]
            entry.spikes += 1
            entry.max_factor = max(entry.max_factor, factor)
        self.num_spikes += 1
        record = {
            "step": step,
            "loss_per_token": float(loss_per_token),
            "median": median,
            "spread": spread,
            "factor": max(b["factor"] for b in blamed),
            "per_utterance": per_utt,
            "suspects": [{k: _plain(v) for k, v in b.items()} for b in blamed],
            "ids": list(ids),
        }
        if self.write_spikes:
            with open(self.spikes_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        log.warning(
            "loss spike at step %d: %s (median %.3f per token)",
            step,
            ", ".join(
                f"{b['id']} {b['loss_per_token']:.3f} = {b['factor']:.1f}x" for b in blamed[:20]
            ),
            median,
        )
        return True

    def suspects(self, limit: int = SUSPECTS_LISTED) -> list[dict[str, Any]]:
        """The utterances blamed in spikes, most surprising first (see the module docstring):
        ``[{"id", "spikes", "appearances", "score", "max_factor"}]``, at most ``limit``."""
        total = sum(t.appearances for t in self.tally.values())
        blamed = sum(t.spikes for t in self.tally.values())
        if not blamed:
            return []
        rate, corpus = blamed / total, math.log10(len(self.tally))
        rows = [
            {
                "id": utt,
                "spikes": t.spikes,
                "appearances": t.appearances,
                "score": round(binomial_surprise(t.spikes, t.appearances, rate) - corpus, 2),
                "max_factor": round(t.max_factor, 1),
            }
            for utt, t in self.tally.items()
            if t.spikes
        ]
        rows.sort(key=lambda r: (-r["score"], -r["spikes"], r["id"]))
        return rows[:limit]

    # --- resume ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The spike detector's state, as plain lists (what a checkpoint keeps)."""
        ids = list(self.tally)
        return {
            "version": 1,
            "num_spikes": self.num_spikes,
            "history": [list(h) for h in self.history],
            "ids": ids,
            "appearances": [self.tally[u].appearances for u in ids],
            "spikes": [self.tally[u].spikes for u in ids],
            "max_factor": [self.tally[u].max_factor for u in ids],
        }

    def load_state_dict(self, state: Mapping[str, Any] | None, step: int) -> None:
        """Continue from a checkpoint taken at optimizer step ``step`` with ``state`` (None:
        a checkpoint without one: rebuild from ``spikes.jsonl``); cut ``spikes.jsonl`` back."""
        records = self._read_spikes()
        self.history.clear()
        self.tally = {}
        if state is not None:
            self.history.extend(list(h) for h in state["history"])
            for utt, n, s, f in zip(
                state["ids"],
                state["appearances"],
                state["spikes"],
                state["max_factor"],
                strict=True,
            ):
                self.tally[utt] = Tally(int(n), int(s), float(f))
            self.num_spikes = int(state["num_spikes"])
            kept = records[: self.num_spikes]
        else:
            kept = [r for r in records if int(r.get("step", 0)) < step]
            self.num_spikes = len(kept)
            for r in kept:
                blamed = [s["id"] for s in r.get("suspects", [])] or list(r.get("ids", []))
                for utt in dict.fromkeys(self.source_id(u) for u in r.get("ids", [])):
                    self.tally.setdefault(utt, Tally()).appearances += 1
                for u in dict.fromkeys(self.source_id(u) for u in blamed):
                    entry = self.tally.setdefault(u, Tally())
                    entry.spikes += 1
                    entry.max_factor = max(entry.max_factor, float(r.get("factor", 0.0)))
        log.info(
            "spike detector resumed at step %d: %d spike(s), %d utterance(s) tallied%s",
            step,
            self.num_spikes,
            len(self.tally),
            "" if state is not None else f" (rebuilt from {SPIKES_FILE})",
        )
        if self.write_spikes and len(kept) != len(records):
            write_text(self.spikes_path, "".join(json.dumps(r) + "\n" for r in kept))

    def _read_spikes(self) -> list[dict[str, Any]]:
        if not self.spikes_path.is_file():
            return []
        with open(self.spikes_path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    # --- validation --------------------------------------------------------------------------

    def on_validation(
        self,
        step: int,
        hyps: Mapping[str, str],
        refs: Mapping[str, str],
        metrics: Mapping[str, float],
    ) -> None:
        """Write the fixed utterances' transcripts; warn when every hypothesis is blank."""
        lines = [f"# step {step}  " + "  ".join(f"{k}={v:.4f}" for k, v in metrics.items())]
        for utt in self.decode_ids:
            if utt in hyps:
                lines.append(f"{utt}\n  REF: {refs.get(utt, '')}\n  HYP: {hyps[utt]}")
        write_text(self.out_dir / "transcripts" / f"step{step:07d}.txt", "\n".join(lines) + "\n")
        if self.blank_warning and hyps and step > self.warmup_steps:
            if all(not h.strip() for h in hyps.values()):
                message = (
                    f"step {step}: all {len(hyps)} dev hypotheses are empty after warmup "
                    f"({self.warmup_steps} steps): check that the tokenizer and token list "
                    "match the model, and that the learning rate is not far too low"
                )
                log.warning(message)
                self.warnings.append(message)


class DiagnosticsCallback(Callback):
    """Hands each training step and each validation of
    :class:`~asrflow.train.loop.module.AsrModule` to ``diagnostics`` (rank 0 judges spikes and
    writes transcripts), and keeps the spike detector's state in the run's checkpoints
    (``asrflow_diagnostics``)."""

    def __init__(self, diagnostics: Diagnostics) -> None:
        self.diagnostics = diagnostics

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        record = getattr(pl_module, "step_record", None)
        if record is None or not trainer.is_global_zero:
            return
        self.diagnostics.observe_loss(
            record.step, record.loss_per_token, record.ids, record.utterance_losses
        )

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        validation = getattr(pl_module, "validation", None)
        if validation is None or trainer.sanity_checking or not trainer.is_global_zero:
            return
        hyps, metrics = validation
        self.diagnostics.on_validation(trainer.global_step, hyps, pl_module.references, metrics)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        checkpoint["asrflow_diagnostics"] = self.diagnostics.state_dict()

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        self.diagnostics.load_state_dict(
            checkpoint.get("asrflow_diagnostics"), int(checkpoint.get("global_step", 0))
        )
