"""Exact mid-epoch resume of the training data order.

Lhotse samplers are iterated in the main process (the DataLoader's workers only load the cuts
of a batch), so the order of batches depends only on the sampler's seed and epoch. On resume the
wrapper replays the epoch's order and drops the batches the interrupted run already trained on,
so the run continues where it stopped instead of re-reading the same data. No audio is loaded
while skipping. :class:`ResumableCSVLogger` keeps the interrupted run's metrics rows.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from asrflow.io import atomic_output

log = logging.getLogger(__name__)


class SkippingSampler:
    """Wraps a Lhotse sampler; ``skip`` batches are dropped at the start of the next epoch.

    The count to skip is the number of batches the *training loop* consumed (kept by
    :class:`~asrflow.train.module.AsrModule` in its checkpoints), not the number the sampler
    handed out: DataLoader workers prefetch batches that were never trained on.
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        skip, self.skip = self.skip, 0
        iterator = iter(self.sampler)
        for _ in range(skip):
            if next(iterator, None) is None:
                break
        if skip:
            log.info("resume: skipped %d batch(es) already trained on in this epoch", skip)
        # not `yield from iterator`: that calls iter() again, and a Lhotse sampler's __iter__
        # returns the sampler itself after rewinding it to the start of the epoch
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch


class ResumableCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger`` that keeps the rows of the run it resumes.

    Lightning's writer deletes an existing ``metrics.csv`` when it starts, so a resumed run's
    learning curve would begin at the resume step. With ``resuming=True`` this one keeps the file
    and appends; the module calls :meth:`resume_at` with the checkpoint's step, which drops rows
    logged after the checkpoint (the interrupted run's steps that the resumed run trains again).
    A run that starts from scratch starts a new file, as Lightning's does.
    """

    def __init__(self, *args: Any, resuming: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resuming = resuming

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            writer = _AppendingWriter if self.resuming else ExperimentWriter
            self._experiment = writer(log_dir=self.log_dir)
        return self._experiment

    def resume_at(self, step: int) -> None:
        """Drop the rows of steps >= ``step`` (Lightning logs the batch that makes optimizer
        step ``k + 1``, and the validation after it, at ``step`` k)."""
        if self.resuming:
            self.experiment.drop_from_step(step)


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if path.is_file():
            with open(path, newline="", encoding="utf-8") as f:
                self.metrics_keys = sorted(csv.DictReader(f).fieldnames or [])

    def drop_from_step(self, step: int) -> None:
        self.save()
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            keys = reader.fieldnames or []
            rows = [r for r in reader if _step(r) is not None and _step(r) < step]
        with atomic_output(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        log.info("resume: kept %d metrics row(s) of steps before %d in %s", len(rows), step, path)


def _step(row: dict[str, str | None]) -> int | None:
    """A metrics row's step; ``None`` for a row cut short (a job killed while writing)."""
    try:
        return int(float(row.get("step") or ""))
    except ValueError:
        return None


class LastCheckpoint(Checkpoint):
    """Writes ``last.ckpt`` after *every* validation, once every top-k callback has taken it in.

    Lightning's ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` only when that very
    callback saved a top-k file at this step (lightning 2.6): with a criterion that stops
    improving, ``last.ckpt`` falls behind and a resume repeats all the steps since, or restores
    the other callbacks' top-k lists as they were then (measured: a resumed, finished run
    reported a best checkpoint it had since replaced). Lightning runs checkpoint callbacks last,
    in list order, so this one goes at the end of the list. The file is written under a
    temporary name and renamed, so a kill mid-write never leaves a truncated ``last.ckpt``.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._saved_step: int | None = None

    @property
    def state_key(self) -> str:
        return "LastCheckpoint"

    def save(self, trainer: Any) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("asrflow-last-checkpoint")
        self._saved_step = trainer.global_step

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.ckpt_path and Path(trainer.ckpt_path) == self.path:
            self._saved_step = trainer.global_step  # resumed from this file: it holds this step

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.save(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        # a run whose max_steps is not a multiple of the validation interval ends between
        # validations: its final state is still what a rerun must find
        if self._saved_step != trainer.global_step:
            self.save(trainer)
