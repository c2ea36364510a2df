"""Failures that are results (diverged, out of memory) vs failures of the job (re-raised)."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest
import torch

from asrflow.train.loop.failures import (
    DIVERGED,
    OUT_OF_MEMORY,
    NonFiniteGuard,
    RankFailures,
    TrainingDiverged,
    result_failure,
)
from asrflow.train.loop.module import AsrModule
from asrflow.train.run.runner import train_run
from tests.train.tiny_run import make_tiny_run, with_overrides


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("tiny"))


def run(spec, root: Path, **overrides):
    spec = with_overrides(spec, overrides)
    return train_run(spec, root / "work", root / "out", root / "summary.json")


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_guard_counts_batches_in_a_row():
    guard = NonFiniteGuard(limit=2)
    guard.observe(5, ["a"])
    guard.reset()
    guard.observe(7, ["b"])
    with pytest.raises(TrainingDiverged, match=r"diverged at step 8.*2 batch\(es\) in a row.*: c"):
        guard.observe(8, ["c"])
    assert guard.total == 3
    with pytest.raises(ValueError):
        NonFiniteGuard(limit=0)


def test_result_failures_are_recognised_through_the_exception_chain():
    assert result_failure(TrainingDiverged("x")) == DIVERGED
    assert result_failure(torch.OutOfMemoryError("CUDA out of memory")) == OUT_OF_MEMORY
    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        except RuntimeError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert result_failure(outer) == OUT_OF_MEMORY
    assert result_failure(RuntimeError("boom")) is None
    assert result_failure(KeyboardInterrupt()) is None


def test_absurd_learning_rate_diverges_and_is_a_result(tiny, tmp_path):
    summary = run(
        tiny,
        tmp_path,
        optim={"lr": 1.0e30},
        trainer={"max_steps": 8, "val_check_interval": 8},
        diagnostics={"max_consecutive_nonfinite": 2},
    )
    assert summary["status"] == "failed" and summary["failure"] == "diverged"
    assert "diverged" in summary["error"] and "optim.lr" in summary["error"]
    assert summary["nonfinite_batches"] == 2
    assert 1 <= summary["steps"] <= 8
    assert summary["update_budget"]["optimizer_steps"] == 8
    assert summary["effective_batch_seconds"] == 3.0
    assert set(summary["hashes"]) >= {"train_cuts", "dev_cuts", "tokens", "recipe"}
    # the same summary in the declared file, the work dir and the (otherwise empty) output dir
    assert read(tmp_path / "summary.json") == read(tmp_path / "work/summary.json") == summary
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json"]


def test_one_nan_batch_is_skipped_and_training_goes_on(tiny, tmp_path, monkeypatch):
    forward = AsrModule.forward

    def nan_at_step_one(self, batch):
        loss, stats, weight = forward(self, batch)
        if self.training and self.global_step == 1:
            loss = loss * math.nan
        return loss, stats, weight

    monkeypatch.setattr(AsrModule, "forward", nan_at_step_one)
    summary = run(tiny, tmp_path)
    assert summary["status"] == "completed", summary.get("error")
    assert summary["nonfinite_batches"] == 1
    assert summary["steps"] == 4
    assert math.isfinite(summary["final_metrics"]["valid/loss"])


def test_out_of_memory_is_a_result(tiny, tmp_path, monkeypatch):
    def oom(self, batch, batch_idx):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")

    monkeypatch.setattr(AsrModule, "training_step", oom)
    summary = run(tiny, tmp_path)
    assert summary["status"] == "failed" and summary["failure"] == "out_of_memory"
    assert "Tried to allocate" in summary["error"]
    assert summary["steps"] == 0
    assert read(tmp_path / "summary.json")["failure"] == "out_of_memory"
    assert (tmp_path / "out/summary.json").is_file()


def test_other_errors_fail_the_job(tiny, tmp_path, monkeypatch):
    def boom(self, batch, batch_idx):
        raise RuntimeError("boom")

    monkeypatch.setattr(AsrModule, "training_step", boom)
    with pytest.raises(RuntimeError, match="boom"):
        run(tiny, tmp_path)
    work = read(tmp_path / "work/summary.json")
    assert work["status"] == "failed" and work["failure"] is None
    assert work["error"] == "RuntimeError: boom"
    assert not (tmp_path / "summary.json").exists()
    assert not (tmp_path / "out").exists()


def watchers(world: int = 2, **kwargs) -> list[RankFailures]:
    """One :class:`RankFailures` per rank, all on one in-process store (as on one process group)."""
    store = torch.distributed.HashStore()
    ranks = [RankFailures(poll_seconds=0.02, **kwargs) for _ in range(world)]
    for rank, watcher in enumerate(ranks):
        watcher.attach(store, rank, world)
    return ranks


def test_a_rank_failure_reaches_the_other_ranks_and_they_acknowledge_it():
    rank0, rank1, rank2 = watchers(3, ack_seconds=20.0)
    started = time.monotonic()
    assert rank1.post(OUT_OF_MEMORY, "OutOfMemoryError: CUDA out of memory")
    # post returned because both others acknowledged, long before ack_seconds
    assert time.monotonic() - started < 10.0
    expected = {
        "rank": 1,
        "failure": OUT_OF_MEMORY,
        "error": "OutOfMemoryError: CUDA out of memory",
    }
    assert rank0.remote() == expected
    assert rank2.remote() == expected
    assert rank1.remote() is None  # its own failure is not a remote one


def test_the_first_posted_failure_wins():
    rank0, rank1 = watchers(ack_seconds=0.5)  # rank 1 never acknowledges its own failure
    rank1.post(None, "RuntimeError: a bug on rank 1")
    # rank 0's own error (the broken connection to rank 1) comes second and is not recorded
    rank0.post(None, "RuntimeError: Connection closed by peer")
    assert rank0.remote()["error"] == "RuntimeError: a bug on rank 1"


def test_post_waits_at_most_ack_seconds_for_a_rank_that_has_gone(caplog):
    store = torch.distributed.HashStore()
    alone = RankFailures(poll_seconds=0.02, ack_seconds=0.3)
    alone.attach(store, 0, 2)  # rank 1 never watches: it has exited
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="asrflow.train.loop.failures"):
        assert alone.post(DIVERGED, "TrainingDiverged: ...")
    assert time.monotonic() - started < 5.0
    assert "not every rank acknowledged" in caplog.text


def test_a_single_process_has_no_one_to_tell():
    watcher = RankFailures()
    assert watcher.post(OUT_OF_MEMORY, "OutOfMemoryError") is False
    assert watcher.remote() is None
