"""How a training run can end other than by finishing, and what asrflow does about each.

Two kinds of failure are *results* of the recipe, not accidents of the job: the run diverged (its
loss stayed NaN/inf) or it did not fit in the accelerator's memory. Rerunning the same recipe on
the same data fails the same way, so :func:`asrflow.train.runner.train_run` records them in the
run's summary (``status: failed``, ``failure: diverged | out_of_memory``) and returns normally:
the job succeeds and the comparison of runs lists the failed one. Every other exception is a
failure of the job and is re-raised, so Snakemake (or SLURM) can retry it.

A job that gets SIGTERM (SLURM's time limit, ``scancel``, preemption) saves
``<work>/checkpoints/last.ckpt`` at the next step boundary (:class:`PreemptionCheckpoint`) and
stops with :class:`TrainingPreempted`; the retry resumes from that checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

DIVERGED = "diverged"
OUT_OF_MEMORY = "out_of_memory"


class TrainingDiverged(AsrflowError):
    """The training loss was NaN or infinite for too many batches in a row."""


class TrainingPreempted(AsrflowError):
    """The job got SIGTERM; ``last.ckpt`` holds where it stopped and a rerun resumes there."""


def result_failure(exc: BaseException) -> str | None:
    """``diverged`` or ``out_of_memory`` when ``exc`` (or an exception it was raised from) is a
    failure that belongs to the recipe, else ``None`` (a failure of the job)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TrainingDiverged):
            return DIVERGED
        if isinstance(current, torch.OutOfMemoryError):
            return OUT_OF_MEMORY
        current = current.__cause__ or current.__context__
    return None


class NonFiniteGuard:
    """Counts batches in a row whose loss is NaN/inf; raises :class:`TrainingDiverged` at
    ``limit``. The module skips each such batch (no backward, no update), so a single bad batch
    (one corrupt file) costs one step, while a diverged model stops the run.

    Example::

        guard = NonFiniteGuard(limit=3)
        if not finite:
            guard.observe(step, ids)  # raises on the third batch in a row
            return None               # skip the update
        guard.reset()
    """

    def __init__(self, limit: int = 3) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.consecutive = 0
        self.total = 0

    def reset(self) -> None:
        self.consecutive = 0

    def observe(self, step: int, ids: Sequence[str] = ()) -> None:
        """Record one batch with a non-finite loss."""
        self.consecutive += 1
        self.total += 1
        shown = ", ".join(list(ids)[:10])
        if self.consecutive >= self.limit:
            raise TrainingDiverged(
                f"training diverged at step {step}: the loss was NaN or infinite for "
                f"{self.consecutive} batch(es) in a row (diagnostics.max_consecutive_nonfinite = "
                f"{self.limit}); lower optim.lr, lengthen scheduler.warmup or set "
                f"trainer.gradient_clip_val (last batch: {shown})"
            )
        log.warning(
            "step %d: non-finite loss (%d in a row, the run stops as diverged at %d); batch "
            "skipped without an update; utterances: %s",
            step,
            self.consecutive,
            self.limit,
            shown,
        )


class PreemptionCheckpoint(L.Callback):
    """On SIGTERM, save a checkpoint at a step boundary and stop training.

    Lightning's signal connector only notes the SIGTERM (``trainer.received_sigterm``) and raises
    its ``SIGTERMException`` at the next check. This callback saves ``path`` (the ``last.ckpt``
    that a rerun resumes from: weights, optimizer, scheduler, step and the position in the
    epoch's batch order) right after the training batch during which the signal came, and stops
    before any validation or further batch. Under DDP the ranks agree through a one-element
    all-reduce per step, so they save together. (A rank whose own SIGTERM comes later than the
    others' may then stop with a communication error instead: the checkpoint is saved all the
    same, and the job fails and is retried either way.) A SIGTERM during validation saves
    nothing (a checkpoint taken in the middle of a validation would resume into a partial one):
    the rerun starts from the checkpoint of the previous validation.
    """

    def __init__(self, path: Pathlike) -> None:
        super().__init__()
        self.path = Path(path)
        self.saved_step: int | None = None

    def _save(self, trainer: L.Trainer) -> None:
        trainer.save_checkpoint(self.path)
        self.saved_step = trainer.global_step
        log.warning(
            "SIGTERM: saved %s at step %d; the rerun resumes from it",
            self.path,
            trainer.global_step,
        )

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if self.saved_step is not None:
            return
        flag = torch.tensor([float(trainer.received_sigterm)], device=pl_module.device)
        if trainer.world_size > 1:
            flag = trainer.strategy.reduce(flag, reduce_op="sum")
        if float(flag.item()) > 0:
            self._save(trainer)

    # stop after the step's metrics are logged, before a validation or the next batch starts

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.saved_step is not None:
            raise SIGTERMException()

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        if self.saved_step is not None:
            raise SIGTERMException()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, SIGTERMException) or self.saved_step is not None:
            return
        if trainer.validating or trainer.sanity_checking:
            log.warning(
                "SIGTERM during validation at step %d: no checkpoint saved; the rerun resumes "
                "from the last one",
                trainer.global_step,
            )
            return
        self._save(trainer)
