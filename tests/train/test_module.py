from types import SimpleNamespace

import pytest
import torch

from asrflow.tokens import greedy_ctc
from asrflow.train.loop.resume import ExactResume, SkippingSampler


def test_greedy_ctc_collapses_repeats_drops_blanks_and_respects_lengths():
    best = torch.tensor([[0, 3, 3, 0, 3, 4, 4, 0], [5, 5, 0, 0, 6, 6, 6, 6]])
    assert greedy_ctc(best, torch.tensor([8, 3]), blank=0) == [[3, 3, 4], [5]]
    assert greedy_ctc(torch.zeros(1, 4, dtype=torch.long), torch.tensor([4]), 0) == [[]]


class Epochs:
    """A stand-in sampler: batch order depends on the epoch only."""

    def __init__(self):
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter([f"e{self.epoch}b{i}" for i in range(5)])


def test_skipping_sampler_resumes_the_epoch_where_training_stopped():
    sampler = SkippingSampler(Epochs())
    sampler.set_epoch(2)
    assert list(sampler) == ["e2b0", "e2b1", "e2b2", "e2b3", "e2b4"]
    sampler.skip = 3
    assert list(sampler) == ["e2b3", "e2b4"]
    assert list(sampler) == ["e2b0", "e2b1", "e2b2", "e2b3", "e2b4"]  # skip applies once
    sampler.skip = 9
    assert list(sampler) == []


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_logged_grad_norm_is_the_total_norm_before_clipping(tmp_path, algorithm: str):
    """train/grad_norm is the 2-norm of every gradient as one vector, as Lightning's grad_norm
    computes it (its "grad_2.0_norm_total"), taken before clipping; the gradients are clipped
    as Lightning's own clipping would."""
    import lightning as L
    from lightning.pytorch.utilities import grad_norm

    from asrflow.train.loop.parts import build_trainer_parts
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    parts = build_trainer_parts(spec, tmp_path / "work")
    module = parts["module"]
    module.trainer = L.Trainer(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu"
    )
    optimizer = module.configure_optimizers()["optimizer"]
    batch = next(iter(parts["train_loader"]))
    module.configure_gradient_clipping(optimizer, 1.0, algorithm)  # no gradients: nothing to do
    loss = module.training_step(batch, 0)
    assert module.step_record is not None and module.step_record.grad_norm is None
    loss.backward()
    before = torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])
    total = float(grad_norm(module, norm_type=2)["grad_2.0_norm_total"])
    assert total == pytest.approx(float(before.norm()), rel=1e-5)
    clip = total / 4 if algorithm == "norm" else float(before.abs().max()) / 4
    module.configure_gradient_clipping(optimizer, clip, algorithm)
    assert float(module.step_record.grad_norm) == pytest.approx(total, rel=1e-5)
    after = torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])
    if algorithm == "norm":
        assert float(after.norm()) == pytest.approx(clip, rel=1e-4)
        assert torch.allclose(after, before * (clip / total), rtol=1e-4, atol=1e-9)
    else:
        assert torch.equal(after, before.clamp(-clip, clip))


def test_a_run_logs_one_row_per_step_with_every_train_metric(tmp_path, caplog):
    """metrics.csv (and TensorBoard) get one train row per optimizer step, at the step
    Lightning's own logging used, with the learning rate of that step's update; without a live
    progress bar nothing is self.log'ged per step, and the progress line shows the loss."""
    import csv
    import logging

    from asrflow.train.loop.schedule import build_optimizer, build_scheduler
    from asrflow.train.run.runner import train_run
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        summary = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert summary["status"] == "completed" and summary["steps"] == 4
    with open(tmp_path / "work/csv/metrics.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["train/loss"]]
    last_line = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")][-1]
    assert last_line.startswith(f"step 4/4 (100%) loss {float(rows[-1]['train/loss']):.4f} ")
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3]
    keys = ("train/loss_per_token", "train/batch_tokens", "train/batch_utterances",
            "train/batch_audio_seconds", "train/padding_ratio", "train/grad_norm",
            "epoch")  # fmt: skip
    assert all(r[key] != "" for r in rows for key in keys)
    recipe = spec.recipe
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], recipe.optim, 1.0)
    scheduler = build_scheduler(optimizer, recipe)["scheduler"]
    expected = []
    for _ in rows:
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    peak = recipe.optim.lr
    assert [float(r["lr"]) for r in rows] == pytest.approx([peak * x for x in expected])
    assert sorted((tmp_path / "work/tensorboard").glob("events.out.tfevents.*"))
    final = summary["final_metrics"]  # the last row and the last validation
    assert final["train/loss_per_token"] == pytest.approx(float(rows[-1]["train/loss_per_token"]))
    assert final["train/loss"] == pytest.approx(float(rows[-1]["train/loss"]))
    assert {"train/grad_norm", "lr", "valid/loss", "valid/wer"} <= set(final)


def test_a_filler_batch_adds_no_gradient_and_logs_nothing(tmp_path):
    """A rank that has run out of shards trains on a filler (asrflow.train.batches.shard_stream):
    zero loss, zero gradient, nothing logged."""
    from asrflow.train.batches.shard_stream import FILLER
    from asrflow.train.loop.parts import build_trainer_parts
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    parts = build_trainer_parts(spec, tmp_path / "work")
    module, batch = parts["module"], next(iter(parts["train_loader"]))
    logged = {}
    module.log = lambda name, value, **kwargs: logged.update({name: value})
    module.log_dict = lambda values, **kwargs: logged.update(values)
    loss = module.training_step({**batch, FILLER: True}, 0)
    loss.backward()
    assert float(loss) == 0.0 and logged == {}
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    assert grads and all(float(g.abs().sum()) == 0.0 for g in grads)
    assert module.step_record is None and module.step_loss is None  # no row, no loss shown
    real = module.training_step(batch, 0)
    record = module.step_record
    assert float(real) > 0.0 and record is not None
    assert float(module.step_loss) == float(real) == float(record.loss)  # the progress line's
    assert record.ids == batch["ids"] and record.num_tokens == int(batch["num_tokens"])
    assert record.utterance_losses is not None and len(record.utterance_losses) == len(record.ids)
    module.training_step({**batch, FILLER: True}, 0)
    assert module.step_record is None  # a filler after a real step: its row is not logged again
    assert logged == {}  # no live progress bar (no Trainer here): nothing self.log'ged


def test_a_sharded_run_reads_every_cut_and_resumes_its_epoch(tmp_path):
    import dataclasses

    from asrflow.data.cuts import load_cuts
    from asrflow.data.shards import ShardSettings, write_shards
    from asrflow.train.batches.shard_stream import ShardLoader
    from asrflow.train.loop.parts import build_trainer_parts
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    write_shards(spec.train_cuts[0], tmp_path / "shards", ShardSettings(shard_size=3))
    spec = dataclasses.replace(spec, train_shards=[str(tmp_path / "shards")])
    parts = build_trainer_parts(spec, tmp_path / "work")
    loader, module = parts["train_loader"], parts["module"]
    assert isinstance(loader, ShardLoader) and module.train_sampler is loader
    cut_ids = [i for batch in loader for i in batch["ids"]]
    assert sorted(cut_ids) == sorted(load_cuts(spec.train_cuts[0]).ids)
    (resume,) = [c for c in parts["callbacks"] if isinstance(c, ExactResume)]
    assert resume.train_sampler is loader
    state = {"epoch": 2, "batches_in_epoch": 1, "world_size": 1}
    trainer = SimpleNamespace(world_size=1, loggers=[])
    resume.on_load_checkpoint(trainer, module, {"asrflow_data": state, "global_step": 5})
    assert (loader.batches.epoch, loader.skip) == (2, 1)


def test_noise_augmentation_reaches_the_train_batches_only(tmp_path):
    """``augmentation.noise_snr`` changes the train loader's audio, never dev's."""
    from asrflow.train.loop.parts import build_trainer_parts
    from tests.train.tiny_run import make_tiny_run

    noise = {"augmentation": {"noise_snr": [0, 0]}}
    clean = make_tiny_run(tmp_path / "data")
    noisy = make_tiny_run(tmp_path / "data", overrides=noise)
    plain = build_trainer_parts(clean, tmp_path / "w0")
    parts = build_trainer_parts(noisy, tmp_path / "w1")
    for name, same in (("train_loader", False), ("dev_loader", True)):
        a, b = next(iter(plain[name])), next(iter(parts[name]))
        assert a["ids"] == b["ids"]
        assert torch.equal(a["speech"], b["speech"]) is same, name
