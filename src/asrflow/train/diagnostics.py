"""Training diagnostics that catch the silent failures: spikes, blank outputs, unreadable progress.

- **Transcripts**: a fixed list of dev utterances is decoded at every validation and written to
  ``transcripts/step<N>.txt`` (reference and hypothesis side by side) so a person can read how the
  model is doing, not just a number.
- **Blank warning**: when every dev hypothesis is empty after warmup, the usual causes are a
  tokenizer/token-list mismatch or a learning rate far too low; it is logged loudly and recorded.
- **Loss spikes**: any batch whose per-token loss exceeds ``spike_factor`` x the running median of
  the last ``spike_window`` batches is appended to ``spikes.jsonl`` with its utterance IDs (a spike
  at one step is usually one corrupt file or transcript).
"""

from __future__ import annotations

import json
import logging
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from asrflow.io import write_text
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

MIN_HISTORY = 10
"""Batches seen before spikes are judged (the median of fewer is noise)."""


class Diagnostics:
    """Collects the diagnostics of one training run under ``out_dir``."""

    def __init__(
        self,
        out_dir: Pathlike,
        decode_ids: Sequence[str],
        *,
        spike_factor: float = 5.0,
        spike_window: int = 50,
        warmup_steps: int = 0,
        blank_warning: bool = True,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.decode_ids = list(decode_ids)
        self.spike_factor = spike_factor
        self.history: deque[float] = deque(maxlen=spike_window)
        self.warmup_steps = warmup_steps
        self.blank_warning = blank_warning
        self.warnings: list[str] = []
        self.num_spikes = 0
        (self.out_dir / "transcripts").mkdir(parents=True, exist_ok=True)

    def observe_loss(self, step: int, loss_per_token: float, ids: Sequence[str]) -> bool:
        """Record one batch's loss; returns True (and logs the IDs) when it is a spike."""
        spike = False
        if len(self.history) >= MIN_HISTORY:
            median = statistics.median(self.history)
            if median > 0 and loss_per_token > self.spike_factor * median:
                spike = True
                self.num_spikes += 1
                record = {
                    "step": step,
                    "loss_per_token": loss_per_token,
                    "median": median,
                    "factor": loss_per_token / median,
                    "ids": list(ids),
                }
                with open(self.out_dir / "spikes.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
                log.warning(
                    "loss spike at step %d: %.3f per token = %.1fx the running median; "
                    "utterances: %s",
                    step,
                    loss_per_token,
                    record["factor"],
                    ", ".join(ids[:20]),
                )
        self.history.append(loss_per_token)
        return spike

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
