"""A training step's metrics row, logged as one row (:class:`MetricsRow`) and written to
TensorBoard as one event (:class:`RowTensorBoardLogger`).

Logged every step, one row per step: ``train/loss`` (the optimized value),
``train/loss_per_token``, ``train/batch_tokens``, ``train/batch_utterances``,
``train/batch_audio_seconds``, ``train/padding_ratio``, ``train/grad_norm`` (before clipping;
the norm that clipping uses, computed once), ``lr`` (the rate of this step's update) and
``epoch``. The validation metrics (``valid/loss`` per token, ``valid/wer`` and ``valid/cer``) are
``self.log``'ged by :class:`~asrflow.train.loop.module.AsrModule` at each validation.

Why not ``self.log`` for the step's row: Lightning's result collection costs ~0.4 ms per value
and step (7 values, demo model, 2 CPU cores: ~3 ms of a ~80 ms step), and its logger connector
writes the CSV file at every step; the CSV logger writes its rows every 100 steps (and at each
validation, checkpoint and the end).

Lightning's ``TensorBoardLogger.log_metrics`` writes one TensorBoard event per value
(``SummaryWriter.add_scalar``: a ``Summary`` protobuf, an ``Event`` and a trip through the
writer's queue each). :class:`RowTensorBoardLogger` writes the row as one event holding every
value: the same scalars (tags, steps and ``simple_value`` s TensorBoard reads back), ~7x
cheaper (9 values: 0.65-0.7 ms against 0.07-0.10 ms a row on 2 CPU cores; in a training step
``espnet_speed.py --breakdown`` timed Lightning's logger at 2.0 ms, the largest of the loop's
extras).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from tensorboard.compat.proto.summary_pb2 import Summary


class RowTensorBoardLogger(TensorBoardLogger):
    """A ``TensorBoardLogger`` whose ``log_metrics`` writes one event per call (see the
    module); a row holding a dict of values (``add_scalars``' grouped charts) goes to
    Lightning's own way."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if any(isinstance(v, Mapping) for v in metrics.values()):
            super().log_metrics(metrics, step)
            return
        values = []
        for key, value in metrics.items():
            tag = f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}" if self._prefix else key
            number = value.item() if isinstance(value, torch.Tensor) else value
            try:
                values.append(Summary.Value(tag=tag, simple_value=float(number)))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{key}: {value!r} is not a number TensorBoard can log") from exc
        if values:  # the writer add_scalar writes through (reopened if closed)
            self.experiment._get_file_writer().add_summary(Summary(value=values), step)


class MetricsRow(Callback):
    """Logs each training step's row (:class:`~asrflow.train.loop.module.StepRecord`) to every
    logger at once, at the step Lightning would use; rank 0 only, as Lightning logs."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        """The last row logged: the run summary's final train figures."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        record = getattr(pl_module, "step_record", None)
        if record is None or not trainer.is_global_zero:
            return
        row = {
            "train/loss": record.loss,
            "train/loss_per_token": record.loss_per_token,
            "train/batch_tokens": record.num_tokens,
            "train/batch_utterances": record.num_utterances,
            "train/batch_audio_seconds": record.audio_seconds,
            "train/padding_ratio": record.padding_ratio,
            "lr": record.lr,
            "train/grad_norm": record.grad_norm,
            "epoch": trainer.current_epoch,
        }
        metrics = {key: float(value) for key, value in row.items() if value is not None}
        self.last = metrics
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=record.step)
