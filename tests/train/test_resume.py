"""The resume wrapper over real Lhotse samplers, alone and sharded over ranks."""

from __future__ import annotations

import pytest

from asrflow.recipe.batching import Batching
from asrflow.train.batches.loader import make_sampler
from asrflow.train.loop.resume import SkippingSampler
from tests.train.test_data import fake_cuts, ids_of

SETTINGS = Batching(max_duration=10.0, num_buckets=3, seed=7)


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
    from asrflow.train.loop.resume import ResumableCSVLogger

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


# --- checkpoints that cannot be trusted -------------------------------------------------------


def _save_ckpt(path, step: int):
    """A Lightning-shaped training checkpoint at ``step``."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"state_dict": {"model.w": torch.full((64,), float(step))}, "global_step": step}, path
    )
    return path


def test_an_intact_last_checkpoint_is_resumed_from(tmp_path):
    from asrflow.train.loop.resume import resume_checkpoint

    assert resume_checkpoint(tmp_path / "checkpoints") is None  # nothing yet: a fresh start
    _save_ckpt(tmp_path / "checkpoints/valid.loss.step0000004.ckpt", 4)
    assert resume_checkpoint(tmp_path / "checkpoints") is None  # no last.ckpt: as before
    last = _save_ckpt(tmp_path / "checkpoints/last.ckpt", 6)
    assert resume_checkpoint(tmp_path / "checkpoints") == last


@pytest.mark.parametrize("damage", ["zero-bytes", "truncated"])
def test_a_damaged_last_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, caplog, damage):
    from asrflow.train.loop.resume import resume_checkpoint

    d = tmp_path / "checkpoints"
    last = _save_ckpt(d / "last.ckpt", 8)
    last.write_bytes(b"" if damage == "zero-bytes" else last.read_bytes()[:300])
    _save_ckpt(d / "valid.loss.step0000002.ckpt", 2)
    newest = _save_ckpt(d / "valid.wer.step0000006.ckpt", 6)
    torn = _save_ckpt(d / "valid.loss.step0000007.ckpt", 7)
    torn.write_bytes(torn.read_bytes()[:-10])  # newer, but cut short: passed over too
    _save_ckpt(d / ".last.ckpt.tmp", 9)  # a temporary name is never a resume point
    with caplog.at_level("WARNING", logger="asrflow.train.loop.resume"):
        assert resume_checkpoint(d) == last
    assert f"resume: {last} is damaged (" in caplog.text
    assert f"resuming from {newest} (step 6)" in caplog.text
    reason = "the file is empty (0 bytes)" if damage == "zero-bytes" else "not a whole zip archive"
    assert reason in caplog.text
    assert last.read_bytes() == newest.read_bytes()  # restored whole: what a rerun reads
    assert resume_checkpoint(d) == last  # and trusted from now on
    assert sorted(p.name for p in d.iterdir() if p.name.startswith(".")) == [".last.ckpt.tmp"]


def test_a_damaged_last_checkpoint_without_another_is_a_clear_error(tmp_path):
    from asrflow.checkpoints import DamagedCheckpoint
    from asrflow.train.loop.resume import resume_checkpoint

    d = tmp_path / "checkpoints"
    (d / "last.ckpt").parent.mkdir(parents=True)
    (d / "last.ckpt").write_bytes(b"")
    torn = _save_ckpt(d / "valid.loss.step0000002.ckpt", 2)
    torn.write_bytes(torn.read_bytes()[:100])
    with pytest.raises(DamagedCheckpoint) as err:
        resume_checkpoint(d)
    msg = str(err.value)
    assert msg.startswith(f"{d / 'last.ckpt'}: cannot resume from it: the file is empty (0 bytes)")
    assert "also damaged: valid.loss.step0000002.ckpt" in msg
    assert f"Delete {d} to train the run from scratch" in msg


class _Strategy:
    def barrier(self, name: str) -> None:
        pass


class _FakeTrainer:
    """What the checkpoint callbacks use of a Trainer; writes through Lightning's checkpoint IO."""

    is_global_zero = True
    loggers: tuple = ()
    strategy = _Strategy()

    def __init__(self, step: int, fail: Exception | None = None) -> None:
        self.global_step = step
        self.fail = fail

    def save_checkpoint(self, filepath, weights_only=None) -> None:
        import torch
        from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

        if self.fail is not None:  # a write cut short: half a file, then the error
            open(filepath, "wb").write(b"PK\x03\x04 half a checkpoint")
            raise self.fail
        state = {"model.w": torch.full((4096,), float(self.global_step))}
        TorchCheckpointIO().save_checkpoint(
            {"state_dict": state, "global_step": self.global_step}, filepath
        )


def test_last_checkpoint_write_that_fails_leaves_the_previous_one(tmp_path):
    import errno

    from asrflow.checkpoints import read_training_checkpoint
    from asrflow.io import WriteFailed
    from asrflow.train.loop.resume import LastCheckpoint

    last = tmp_path / "last.ckpt"
    callback = LastCheckpoint(last)
    callback.save(_FakeTrainer(2))
    assert read_training_checkpoint(last)["global_step"] == 2
    with pytest.raises(WriteFailed) as err:
        callback.save(_FakeTrainer(4, fail=OSError(errno.ENOSPC, "No space left on device")))
    assert str(err.value).startswith(f"{last}: could not be written whole (OSError: ")
    assert f"{last} still holds the previous checkpoint, which a rerun resumes from" in str(
        err.value
    )
    assert read_training_checkpoint(last)["global_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    with pytest.raises(ValueError, match="not a write failure"):  # others pass through unnamed
        callback.save(_FakeTrainer(4, fail=ValueError("not a write failure")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_top_k_checkpoints_are_written_whole_and_keyed_as_lightnings(tmp_path):
    import errno

    from lightning.pytorch.callbacks import ModelCheckpoint

    from asrflow.checkpoints import read_training_checkpoint
    from asrflow.io import WriteFailed
    from asrflow.train.loop.resume import AtomicModelCheckpoint

    kwargs = {"dirpath": tmp_path, "monitor": "valid/loss", "mode": "min", "save_top_k": 2}
    callback = AtomicModelCheckpoint(**kwargs)
    assert callback.state_key == ModelCheckpoint(**kwargs).state_key  # old runs still resume
    target = tmp_path / "valid.loss.step0000004.ckpt"
    callback._save_checkpoint(_FakeTrainer(4), str(target))
    assert read_training_checkpoint(target)["global_step"] == 4
    assert callback._last_checkpoint_saved == str(target)
    broken = tmp_path / "valid.loss.step0000006.ckpt"
    with pytest.raises(WriteFailed, match=r"valid\.loss\.step0000006\.ckpt was not created"):
        callback._save_checkpoint(_FakeTrainer(6, fail=OSError(errno.EFBIG, "too large")), broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_disk_that_fills_during_a_checkpoint_keeps_the_last_one(tmp_path):
    """The real write path (Lightning's checkpoint IO, torch.save) under a file-size limit."""
    from asrflow.checkpoints import read_training_checkpoint
    from tests.test_io import run_with_file_size_limit

    last = tmp_path / "last.ckpt"
    setup = f"""
        from pathlib import Path
        from asrflow.train.loop.resume import LastCheckpoint
        from tests.train.test_resume import _FakeTrainer
        callback = LastCheckpoint(Path({str(last)!r}))
        callback.save(_FakeTrainer(2))
    """
    # the first checkpoint (16 KiB of weights) is written before the limit, the second is not
    proc = run_with_file_size_limit("callback.save(_FakeTrainer(4))", 8192, tmp_path, setup)
    assert proc.returncode == 3, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"WriteFailed: {last}: could not be written whole (")
    ), proc.stderr
    assert "still holds the previous checkpoint, which a rerun resumes from" in proc.stderr
    assert read_training_checkpoint(last)["global_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_rerun_over_a_zero_byte_last_checkpoint_resumes_from_an_intact_one(tmp_path, caplog):
    """A run whose last.ckpt was left empty (a full disk, a node lost mid-write) is rerun."""
    from asrflow.checkpoints import read_training_checkpoint
    from asrflow.train.run.runner import train_run
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    work, out, summary = tmp_path / "work", tmp_path / "out", tmp_path / "summary.json"
    assert train_run(spec, work, out, summary)["status"] == "completed"
    checkpoints = work / "checkpoints"
    last = checkpoints / "last.ckpt"
    (top,) = (p for p in checkpoints.glob("*.ckpt") if p != last)
    top_step = read_training_checkpoint(top)["global_step"]
    last.write_bytes(b"")

    with caplog.at_level("WARNING", logger="asrflow.train.loop.resume"):
        rerun = train_run(spec, work, out, summary)
    assert f"resume: {last} is damaged (the file is empty (0 bytes))" in caplog.text
    assert f"resuming from {top} (step {top_step})" in caplog.text
    assert rerun["status"] == "completed" and rerun["resumed_from"] == str(last)
    assert rerun["steps"] == 4
    assert read_training_checkpoint(last)["global_step"] == 4  # whole again
    assert read_training_checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 4
