"""The resume wrapper over real Lhotse samplers, alone and sharded over ranks."""

from __future__ import annotations

import pytest

from asrflow.train.data import make_sampler
from asrflow.train.resume import SkippingSampler
from tests.train.test_data import fake_cuts, ids_of

SETTINGS = {"max_duration": 10.0, "num_buckets": 3, "seed": 7}


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_skipping_continues_each_ranks_epoch_where_it_stopped(world_size: int):
    cuts = fake_cuts(120)
    for rank in range(world_size):
        full = ids_of(make_sampler(cuts, SETTINGS, world_size=world_size, rank=rank))
        assert len(full) > 4
        resumed = SkippingSampler(make_sampler(cuts, SETTINGS, world_size=world_size, rank=rank))
        resumed.skip = 3
        assert ids_of(resumed) == full[3:]
        assert ids_of(resumed) == full  # the skip applies to one epoch only


def test_sharded_epoch_covers_every_cut_once():
    cuts = fake_cuts(120)
    shards = [ids_of(make_sampler(cuts, SETTINGS, world_size=2, rank=r)) for r in range(2)]
    assert len(shards[0]) == len(shards[1])  # equal steps on every rank, or DDP hangs
    seen = [c for shard in shards for batch in shard for c in batch]
    assert sorted(seen) == sorted(cuts.ids)


def _write_metrics(path, rows: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("lr,step,train/loss\n" + rows, encoding="utf-8")


def _steps(path) -> list[int]:
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return [int(r["step"]) for r in csv.DictReader(f)]


def test_resumed_csv_logger_keeps_the_rows_before_the_checkpoint(tmp_path):
    from asrflow.train.resume import ResumableCSVLogger

    metrics = tmp_path / "csv/metrics.csv"
    rows = "".join(f"0.1,{s},{5 - s}.0\n" for s in range(6))
    _write_metrics(metrics, rows + "0.1,")  # the last row cut short by a SIGKILL
    logger = ResumableCSVLogger(tmp_path, name="csv", version="", resuming=True)
    logger.resume_at(4)
    assert _steps(metrics) == [0, 1, 2, 3]
    logger.log_metrics({"train/loss": 0.5, "valid/loss": 0.7}, step=4)
    logger.save()
    assert _steps(metrics) == [0, 1, 2, 3, 4]
    assert "valid/loss" in metrics.read_text(encoding="utf-8").splitlines()[0]

    fresh = ResumableCSVLogger(tmp_path, name="csv", version="", resuming=False)
    fresh.resume_at(2)  # no effect: nothing is resumed
    fresh.log_metrics({"train/loss": 9.0}, step=0)
    fresh.save()
    assert _steps(metrics) == [0]
