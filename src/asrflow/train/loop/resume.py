"""Exact mid-epoch resume of the training data order.

Lhotse samplers are iterated in the main process (the DataLoader's workers only load the cuts
of a batch), so the order of batches depends only on the sampler's seed and epoch. On resume the
wrapper replays the epoch's order and drops the batches the interrupted run already trained on,
so the run continues where it stopped instead of re-reading the same data. No audio is loaded
while skipping. :class:`ExactResume` counts the batches of the epoch, keeps the count in every
checkpoint (``asrflow_data``) and hands it to the sampler on resume;
:class:`ResumableCSVLogger` keeps the interrupted run's metrics rows.

Checkpoints are never trusted half-written. Every checkpoint asrflow's training writes
(:class:`LastCheckpoint`, :class:`AtomicModelCheckpoint`) goes to a temporary name beside the
target and is renamed into place once whole; a write that runs out of room raises
:class:`~asrflow.io.WriteFailed` and leaves the previous file as it was. Before a rerun resumes,
:func:`resume_checkpoint` reads ``last.ckpt`` whole (:func:`asrflow.checkpoints.checkpoint_damage`):
a damaged one (empty, cut short, failing a CRC check) is replaced, with a warning naming it, by
the newest intact checkpoint of the run, or the rerun stops with
:class:`~asrflow.checkpoints.DamagedCheckpoint` when there is none.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from weakref import proxy

from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from asrflow.checkpoints import DamagedCheckpoint, read_training_checkpoint
from asrflow.io import atomic_output, is_write_failure, write_failed
from asrflow.train.batches.shard_stream import ShardLoader

log = logging.getLogger(__name__)


class SkippingSampler:
    """Wraps a Lhotse sampler; ``skip`` batches are dropped at the start of the next epoch.

    The count to skip is the number of batches the *training loop* consumed (kept by
    :class:`~asrflow.train.loop.module.AsrModule` in its checkpoints), not the number the sampler
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


class ExactResume(Callback):
    """Resumes a run at the batch of the epoch where it stopped.

    Counts the batches each epoch has handed out (at a batch's start: a checkpoint taken at
    this batch's end by a callback must count it as consumed), keeps the count, the epoch and
    the world size in every checkpoint (``asrflow_data``, with the metrics rows flushed to disk
    beside the weights), and on resume tells ``train_sampler`` (a :class:`SkippingSampler` or a
    sharded run's :class:`~asrflow.train.batches.shard_stream.ShardLoader`) how many batches to
    skip."""

    def __init__(self, train_sampler: Any) -> None:
        self.train_sampler = train_sampler
        self.batches_in_epoch = 0
        self.resumed_batches = 0
        self._resync_log_step = False

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.batches_in_epoch, self.resumed_batches = self.resumed_batches, 0
        if isinstance(self.train_sampler, ShardLoader):  # Lightning's hook reaches samplers only
            self.train_sampler.set_epoch(trainer.current_epoch)

    def on_train_batch_start(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        self.batches_in_epoch += 1
        if self._resync_log_step:
            self._resync_log_step = False
            # the step loggers write is Lightning's count of batches that stepped, which equals
            # global_step at a batch's start; lightning 2.6 restores it one off for checkpoints
            # taken in an epoch after the first, or where it raised its own SIGTERMException
            # (measured: a continued run logged one step twice)
            loop = trainer.fit_loop.epoch_loop
            if loop._batches_that_stepped != trainer.global_step:
                log.info(
                    "resume: logging step %d, not Lightning's %d",
                    trainer.global_step,
                    loop._batches_that_stepped,
                )
                loop._batches_that_stepped = trainer.global_step

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        for logger in trainer.loggers:  # the rows up to here on disk with the weights
            logger.save()
        checkpoint["asrflow_data"] = {
            "epoch": trainer.current_epoch,
            "batches_in_epoch": self.batches_in_epoch,
            "world_size": trainer.world_size,
        }

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        state = checkpoint.get("asrflow_data") or {}
        batches = int(state.get("batches_in_epoch", 0))
        saved_world, world = int(state.get("world_size", 1)), int(trainer.world_size)
        if saved_world != world:
            log.warning(
                "resuming on %d process(es) a run checkpointed on %d: each rank skips %d "
                "batch(es) of the epoch, an approximation of where it stopped",
                world,
                saved_world,
                batches * saved_world // world,
            )
            batches = batches * saved_world // world
        self.resumed_batches = batches
        self._resync_log_step = True
        if self.train_sampler is not None:
            self.train_sampler.skip = batches
        if isinstance(self.train_sampler, ShardLoader):  # its first epoch's workers start early
            self.train_sampler.set_epoch(int(state.get("epoch", 0)))
        for logger in trainer.loggers:
            if isinstance(logger, ResumableCSVLogger):
                logger.resume_at(int(checkpoint.get("global_step", 0)))


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
        save_checkpoint_atomically(trainer, self.path)
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


def save_checkpoint_atomically(trainer: Any, path: Path, weights_only: bool | None = None) -> None:
    """``trainer.save_checkpoint`` to a temporary name beside ``path``, renamed once whole.

    Every rank takes part (as in ``trainer.save_checkpoint``); global rank 0 writes and renames.
    A write that fails removes the temporary file and leaves ``path`` as it was; one that ran out
    of room (disk, quota, file-size limit) is raised as :class:`~asrflow.io.WriteFailed`.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        trainer.save_checkpoint(tmp, weights_only)
        if trainer.is_global_zero:
            os.replace(tmp, path)
    except Exception as exc:
        if trainer.is_global_zero:
            tmp.unlink(missing_ok=True)
        if is_write_failure(exc):
            kept = "still holds the previous checkpoint, which a rerun resumes from"
            raise write_failed(path, exc, kept=kept) from exc
        raise


class AtomicModelCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` whose files are written whole or not at all.

    Lightning (2.6, through fsspec) writes a checkpoint to a file in the system's temporary
    directory and *moves* it to its name: across filesystems (``/tmp`` on a node's disk, the
    results on a shared one) that move is a copy, and a disk that fills during it leaves a torn
    top-k checkpoint under its final name. This one writes beside the target and renames it
    (:func:`save_checkpoint_atomically`). Its state in a checkpoint is keyed as Lightning's own
    ``ModelCheckpoint``'s, so runs checkpointed by either resume with the other.
    """

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"ModelCheckpoint{kwargs!r}"

    def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
        save_checkpoint_atomically(trainer, Path(filepath), self.save_weights_only)
        # what ModelCheckpoint._save_checkpoint does after writing (lightning 2.6)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))


def resume_checkpoint(checkpoint_dir: Path, last: str = "last.ckpt") -> Path | None:
    """The checkpoint a rerun resumes from: ``checkpoint_dir/last``, read whole first.

    ``None`` when it does not exist (the run starts from scratch, as it always has). A damaged
    one (empty, cut short, failing a CRC check, not loadable) is not trusted: the other
    ``*.ckpt`` files of the directory (the top-k checkpoints) are read whole, and the one with
    the highest ``global_step`` is copied over it (atomically), with a warning naming both; the
    steps after it are trained again. Restoring ``last`` itself, rather than resuming from the
    other file, keeps everything that reads ``last`` whole, even when the rerun has no step left
    to train and so writes no new one. Under DDP every rank may restore it: the copies are the
    same bytes. With no intact checkpoint, raises :class:`~asrflow.checkpoints.DamagedCheckpoint`
    saying what to do.
    """
    checkpoint_dir = Path(checkpoint_dir)
    path = checkpoint_dir / last
    if not path.exists():
        return None
    try:
        read_training_checkpoint(path)
        return path
    except DamagedCheckpoint as exc:
        damage = exc.reason
    intact: list[tuple[int, float, Path]] = []
    broken: list[str] = []
    for other in sorted(checkpoint_dir.glob("*.ckpt")):
        if other == path or other.name.startswith("."):
            continue
        try:
            step = int(read_training_checkpoint(other)["global_step"])
        except DamagedCheckpoint:
            broken.append(other.name)
            continue
        intact.append((step, other.stat().st_mtime, other))
    if not intact:
        also = f" (also damaged: {', '.join(broken)})" if broken else ""
        raise DamagedCheckpoint(
            f"{path}: cannot resume from it: {damage}; {checkpoint_dir} holds no other intact "
            f"checkpoint{also}. Delete {checkpoint_dir} to train the run from scratch",
            damage,
        )
    step, _, fallback = max(intact)
    log.warning(
        "resume: %s is damaged (%s) and not trusted; resuming from %s (step %d), the newest "
        "intact checkpoint in %s, copied over it: the steps after it are trained again",
        path,
        damage,
        fallback,
        step,
        checkpoint_dir,
    )
    with atomic_output(path) as tmp:
        shutil.copyfile(fallback, tmp)
    return path
