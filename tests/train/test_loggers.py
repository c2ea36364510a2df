"""asrflow.train.loop.loggers: a metrics row as one TensorBoard event, read back as Lightning's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from asrflow.train.loop.loggers import RowTensorBoardLogger

ROWS = [
    (0, {"train/loss": 4.5, "train/grad_norm": torch.tensor(2.25), "lr": 1e-4, "epoch": 0}),
    (1, {"train/loss": 3.75, "train/grad_norm": torch.tensor(1.5), "lr": 2e-4, "epoch": 0}),
    (2, {"valid/loss": 3.5, "valid/wer": torch.tensor(0.875), "epoch": 1}),
]


def scalars(logger_type: type, root: Path, prefix: str = "") -> dict:
    logger = logger_type(root, name="tb", version="", prefix=prefix)
    for step, row in ROWS:
        logger.log_metrics(row, step=step)
    logger.finalize("success")
    events = EventAccumulator(str(root / "tb"))
    events.Reload()
    found = {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }
    return found


@pytest.mark.parametrize("prefix", ["", "run"])
def test_a_row_as_one_event_reads_back_as_lightnings_one_event_per_value(tmp_path, prefix):
    ours = scalars(RowTensorBoardLogger, tmp_path / "ours", prefix)
    theirs = scalars(TensorBoardLogger, tmp_path / "lightning", prefix)
    assert ours == theirs
    join = f"{prefix}-" if prefix else ""
    assert ours[f"{join}train/loss"] == [(0, 4.5), (1, 3.75)]
    assert ours[f"{join}valid/wer"] == [(2, 0.875)]


def test_grouped_values_and_non_numbers(tmp_path):
    logger = RowTensorBoardLogger(tmp_path, name="tb", version="")
    logger.log_metrics({"losses": {"ctc": 1.0, "att": 2.0}}, step=0)  # Lightning's add_scalars
    with pytest.raises(ValueError, match="train/loss: 'high' is not a number"):
        logger.log_metrics({"train/loss": "high"}, step=1)
    logger.finalize("success")
    assert sorted(p.name for p in (tmp_path / "tb").iterdir() if p.is_dir())  # add_scalars' dirs
