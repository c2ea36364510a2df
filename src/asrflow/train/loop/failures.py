"""How a training run can end other than by finishing, and what asrflow does about each.

Two kinds of failure are *results* of the recipe, not accidents of the job: the run diverged (its
loss stayed NaN/inf) or it did not fit in the accelerator's memory. Rerunning the same recipe on
the same data fails the same way, so :func:`asrflow.train.run.runner.train_run` records them in the
run's summary (``status: failed``, ``failure: diverged | out_of_memory``) and returns normally:
the job succeeds and the comparison of runs lists the failed one. Every other exception is a
failure of the job and is re-raised, so Snakemake (or SLURM) can retry it.

Under DDP a failure can strike one rank alone (out of memory, a bug, a bad file in one shard): the
others would wait in their next collective until the process group's timeout (30 minutes), or fail
with a communication error that hides the cause. :class:`RankFailures` spreads the failure: the
failing rank posts it in the process group's key-value store, every other rank's watcher thread
sees it within a second (and aborts a blocked NCCL collective; gloo's fail by themselves once the
failing process exits), and each rank then ends as the failing one does: rank 0 records the same
failure, naming the rank, and the job succeeds for a result failure and fails otherwise.

A job that gets SIGTERM (SLURM's time limit, ``scancel``, preemption) saves
``<work>/checkpoints/last.ckpt`` at the next step boundary (:class:`PreemptionCheckpoint`) and
stops with :class:`TrainingPreempted`; the retry resumes from that checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Sequence
from datetime import timedelta
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
    """On SIGTERM, save a checkpoint at the next step boundary and stop training.

    Lightning's own SIGTERM handling notes the signal and raises its ``SIGTERMException`` at
    whatever check comes next: in the middle of a validation, or at the end of an epoch after the
    loop's counters have moved on. A checkpoint saved there resumes one logging step off and,
    at a validation step, skips that validation (measured, lightning 2.6: a scancel'd job's
    metrics then lacked a step). So from ``on_train_start`` this callback takes SIGTERM over: its
    handler only notes the signal (and, like Lightning's, passes it on to ranks that Lightning's
    launcher started). At the end of the training batch during which the signal came it saves
    ``path`` (the ``last.ckpt`` that a rerun resumes from: weights, optimizer, scheduler, step and
    the position in the epoch's batch order), lets a validation due at that step run (its
    ``last.ckpt``, written at the validation's end, replaces this one), and stops before the next
    batch. A signal during a validation lets it finish first. Under DDP the ranks agree through a
    one-element all-reduce per step, so they save together.

    If SLURM's ``KillWait`` (30 s by default) ends the job before that, the rerun resumes from the
    checkpoint saved at the batch's end, or from the previous validation's.
    """

    def __init__(self, path: Pathlike) -> None:
        super().__init__()
        self.path = Path(path)
        self.saved_step: int | None = None
        self.received = False
        self._trainer: L.Trainer | None = None
        self._previous: Any = None

    def _notice(self, signum: int, _frame: Any) -> None:
        log.warning("SIGTERM received: saving a checkpoint at the end of this training batch")
        trainer = self._trainer
        launcher = trainer.strategy.launcher if trainer is not None else None
        if not self.received and launcher is not None:
            launcher.kill(signum)  # ranks Lightning started as child processes
        self.received = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set in the main thread: Lightning's stay
        self._trainer = trainer
        self._previous = signal.signal(signal.SIGTERM, self._notice)
        # a SIGTERM during set-up (before this handler) was noted by Lightning's: take it over
        if trainer.received_sigterm:
            trainer._signal_connector.received_sigterm = False
            self.received = True

    def _restore(self) -> None:
        # before Lightning's teardown puts back the handlers from before the fit: restored after
        # it, Lightning's handler (of a finished Trainer) would swallow a later SIGTERM
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        self._trainer = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if self.saved_step is not None:
            return
        flag = torch.tensor([float(self.received)], device=pl_module.device)
        if trainer.world_size > 1:
            flag = trainer.strategy.reduce(flag, reduce_op="sum")
        if float(flag.item()) > 0:
            # under a temporary name, renamed: SIGKILL mid-write must not leave a torn last.ckpt
            tmp = self.path.with_name(f".{self.path.name}.sigterm.tmp")
            trainer.save_checkpoint(tmp)  # every rank takes part; rank 0 writes
            if trainer.is_global_zero:
                os.replace(tmp, self.path)
            trainer.strategy.barrier("asrflow-sigterm-checkpoint")
            self.saved_step = trainer.global_step
            log.warning(
                "SIGTERM: saved %s at step %d; the rerun resumes from it",
                self.path,
                trainer.global_step,
            )

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        # the step's metrics are logged and a validation due at it has run
        if self.saved_step is not None:
            raise SIGTERMException()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._restore()
        if isinstance(exception, SIGTERMException) and self.saved_step is None:
            log.warning(
                "SIGTERM at step %d before training started: no checkpoint saved; the rerun "
                "resumes from the last one",
                trainer.global_step,
            )


class RankFailures(L.Callback):
    """Spreads one DDP rank's failure to the other ranks (see the module docstring).

    Started at ``setup`` (the process group is up by then) when there is more than one rank:
    holds the group's store and runs a daemon thread that polls it every ``poll_seconds``. A rank
    whose training fails calls :meth:`post`; a rank whose training ends in an exception asks
    :meth:`remote` whether another rank failed first, and then reports that rank's failure
    instead of its own communication error. Every rank that sees a posted failure acknowledges
    it, and :meth:`post` waits (at most ``ack_seconds``) for those acknowledgements, so that the
    rank holding the store (rank 0) stays up until the others have read it.
    """

    _fits = 0  # fits set up in this process: every rank runs the same ones, in the same order

    def __init__(self, poll_seconds: float = 1.0, ack_seconds: float = 30.0) -> None:
        super().__init__()
        self.poll_seconds = poll_seconds
        self.ack_seconds = ack_seconds
        self.rank = 0
        self.world_size = 1
        self.store: Any = None
        self.backend: str | None = None
        self.key = ""
        self._remote: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        import torch.distributed as dist  # torch only for a DDP job's ranks

        if trainer.world_size < 2 or not (dist.is_available() and dist.is_initialized()):
            return
        from torch.distributed.distributed_c10d import _get_default_store  # private, DDP only

        # a key of its own per fit: a failure posted in an earlier fit of this process (a run
        # that resumes in the same processes) stays in the store
        RankFailures._fits += 1
        key = f"asrflow/failure/{RankFailures._fits}"
        self.attach(_get_default_store(), trainer.global_rank, trainer.world_size, key)
        self.backend = str(dist.get_backend())

    def attach(self, store: Any, rank: int, world_size: int, key: str = "asrflow/failure") -> None:
        """Watch ``key`` in ``store`` as ``rank`` of ``world_size`` (:meth:`setup` does)."""
        self.store, self.rank, self.world_size, self.key = store, rank, world_size, key
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="asrflow-rank-failures")
        self._thread.daemon = True
        self._thread.start()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._stop.set()  # the store stays held: the failure path reads and posts after teardown

    def _read(self) -> dict[str, Any] | None:
        if self.store is None or not self.store.check([self.key]):
            return None
        return json.loads(self.store.get(self.key))

    def _acknowledge(self, posted: dict[str, Any]) -> None:
        if posted["rank"] != self.rank:
            self.store.set(f"{self.key}/seen/{self.rank}", "1")

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                posted = self._read()
            except Exception:  # the store's host (rank 0) has gone: nothing more to learn
                return
            if posted is None or posted["rank"] == self.rank:
                continue
            self._remote = posted
            log.error(
                "rank %d failed (%s): %s; stopping rank %d",
                posted["rank"],
                posted["failure"] or "error",
                posted["error"],
                self.rank,
            )
            try:
                self._acknowledge(posted)
            except Exception:
                pass
            if self.backend == "nccl":  # a blocked NCCL collective waits for its timeout
                from torch.distributed.distributed_c10d import _abort_process_group  # private

                _abort_process_group()
            return

    def remote(self) -> dict[str, Any] | None:
        """The failure another rank posted (``rank``, ``failure``, ``error``), if any."""
        if self._remote is None and self.store is not None:
            try:
                posted = self._read()
            except Exception:
                posted = None
            if posted is not None and posted["rank"] != self.rank:
                self._remote = posted
                self._acknowledge(posted)
        return self._remote

    def post(self, failure: str | None, error: str) -> bool:
        """Tell the other ranks this rank failed; False when there are none to tell. The first
        post wins; waits for the others' acknowledgements (at most ``ack_seconds``)."""
        if self.store is None:
            return False
        self._stop.set()
        posted = {"rank": self.rank, "failure": failure, "error": error}
        try:
            self.store.compare_set(self.key, "", json.dumps(posted))
            others = [f"{self.key}/seen/{r}" for r in range(self.world_size) if r != self.rank]
            self.store.wait(others, timedelta(seconds=self.ack_seconds))
        except Exception as exc:  # a rank that has gone already, or the store with rank 0
            log.warning("rank %d: not every rank acknowledged its failure: %s", self.rank, exc)
        return True
