"""Training progress for logs nobody watches live: one line every so often instead of a bar.

Lightning's progress bar redraws itself with carriage returns on every step; written to a file
(a SLURM job's output, CI, ``snakemake ... > run.log``) each redraw stays, and a run's log grows
by megabytes of frames nobody can read. When stderr is not a terminal, the bar is off and
:class:`LineProgress` logs one line every ``every_seconds`` (and at the last step)::

    step 1200/3000 (40%) loss 0.8123 lr 4.10e-04 2.31 steps/s ETA 13m00s

and one line per validation with its metrics. On a terminal the live bar stays.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)

DEFAULT_EVERY_SECONDS = 60.0


def watched(stream: IO[str] | None = None) -> bool:
    """Whether someone watches the output live (``stream``, default stderr, is a terminal)."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def duration(seconds: float) -> str:
    """``3725`` -> ``"1h02m05s"``; ``"?"`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class LineProgress(Callback):
    """Log a progress line every ``every_seconds`` and at the last step (rank 0 only)."""

    def __init__(self, every_seconds: float = DEFAULT_EVERY_SECONDS, clock=time.monotonic) -> None:
        self.every_seconds = every_seconds
        self.clock = clock
        self._start: tuple[float, int] | None = None
        self._last = -math.inf

    def line(self, step: int, max_steps: int, metrics: Mapping[str, Any], lr: float | None) -> str:
        """The progress line for ``step`` (see the module docstring)."""
        now = self.clock()
        start_time, start_step = self._start or (now, step)
        rate = (step - start_step) / (now - start_time) if now > start_time else math.nan
        parts = [f"step {step}/{max_steps}" if max_steps > 0 else f"step {step}"]
        if max_steps > 0:
            parts[0] += f" ({100 * step / max_steps:.0f}%)"
        loss = _number(metrics.get("train/loss"))
        if loss is not None:
            parts.append(f"loss {loss:.4f}")
        if lr is not None:
            parts.append(f"lr {lr:.2e}")
        if math.isfinite(rate) and rate > 0:
            parts.append(f"{rate:.2f} steps/s")
            if max_steps > 0:
                parts.append(f"ETA {duration((max_steps - step) / rate)}")
        return " ".join(parts)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = (self.clock(), int(trainer.global_step))
        self._last = self.clock()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        if not trainer.is_global_zero:
            return
        step, max_steps = int(trainer.global_step), int(trainer.max_steps)
        now = self.clock()
        if now - self._last < self.every_seconds and step != max_steps:
            return
        self._last = now
        optimizers = getattr(trainer, "optimizers", None) or []
        lr = optimizers[0].param_groups[0]["lr"] if optimizers else None
        metrics = dict(trainer.callback_metrics)
        if getattr(pl_module, "step_loss", None) is not None:  # AsrModule's: not self.log'ged
            metrics["train/loss"] = pl_module.step_loss
        log.info("%s", self.line(step, max_steps, metrics, lr))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.is_global_zero or trainer.sanity_checking:
            return
        shown = {
            k: v
            for k in sorted(trainer.callback_metrics)
            if k.startswith("valid/") and (v := _number(trainer.callback_metrics[k])) is not None
        }
        if shown:
            values = " ".join(f"{k} {v:.4f}" for k, v in shown.items())
            log.info("validation at step %d: %s", trainer.global_step, values)


def progress_settings(stream: IO[str] | None = None) -> tuple[bool, list[Callback]]:
    """``(enable_progress_bar, extra callbacks)`` for the Trainer: the live bar on a terminal,
    else :class:`LineProgress`."""
    if watched(stream):
        return True, []
    return False, [LineProgress()]
