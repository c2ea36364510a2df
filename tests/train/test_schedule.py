"""Warmup + cosine schedule, optimizers, and agreement with the trainer's step count."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from asrflow.errors import AsrflowError
from asrflow.recipe.sections import OptimConfig, Recipe, SchedulerConfig, TrainerConfig
from asrflow.train.loop.schedule import (
    build_optimizer,
    build_scheduler,
    implementation_kwargs,
    total_steps,
    warmup_cosine_lambda,
    warmup_steps,
)

MODEL = {"encoder": "conformer", "model_conf": {"ctc_weight": 1.0}}


def recipe(max_steps: int = 100, **scheduler) -> Recipe:
    return Recipe(
        model=MODEL,
        trainer=TrainerConfig(max_steps=max_steps, val_check_interval=max_steps),
        scheduler=SchedulerConfig(**scheduler),
    )


def lrs_over_run(r: Recipe, peak: float = 1.0) -> list[float]:
    """The LR each optimizer step uses, then the LR after the last step (max_steps + 1 values)."""
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], r.optim, peak)
    sched = build_scheduler(opt, r)["scheduler"]
    lrs = []
    for _ in range(r.trainer.max_steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    lrs.append(opt.param_groups[0]["lr"])
    return lrs


def test_warmup_starts_small_and_peaks_exactly_at_warmup():
    f = warmup_cosine_lambda(10, 100)
    assert 0 < f(0) <= 0.1
    assert all(f(s) < f(s + 1) for s in range(10))
    assert f(10) == 1.0
    assert f(11) < 1.0


def test_cosine_midpoint_and_end():
    f = warmup_cosine_lambda(10, 110, min_lr_ratio=0.1)
    assert f(60) == pytest.approx(0.1 + 0.9 * 0.5)
    assert f(110) == pytest.approx(0.1)
    assert f(500) == pytest.approx(0.1)  # flat after the end
    assert f(35) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_scheduler_reaches_min_lr_exactly_when_the_trainer_stops():
    r = replace(recipe(200, warmup=0.1, min_lr_ratio=0.05), optim=OptimConfig(lr=2e-3))
    lrs = lrs_over_run(r, peak=2e-3)
    assert lrs[20] == pytest.approx(2e-3)  # peak at warmup (20 steps)
    assert max(lrs) == pytest.approx(2e-3)
    assert lrs[-2] > 0.05 * 2e-3  # the last update still learns a little
    assert lrs[-1] == pytest.approx(0.05 * 2e-3)  # after max_steps updates: the floor


def test_lightning_scheduler_config():
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], OptimConfig(), 1e-3)
    cfg = build_scheduler(opt, recipe())
    assert cfg["interval"] == "step"
    assert cfg["frequency"] == 1
    assert cfg["name"] == "lr"
    assert isinstance(cfg["scheduler"], torch.optim.lr_scheduler.LambdaLR)
    # the schedule's settings travel with the checkpoint
    assert cfg["scheduler"].state_dict()["lr_lambdas"][0] == {
        "warmup": 2,
        "total": 100,
        "min_lr_ratio": 0.0,
    }


def test_total_steps_mismatch_is_an_error():
    assert total_steps(SchedulerConfig(total_steps=None), 2500) == 2500
    assert total_steps(SchedulerConfig(total_steps=2500), 2500) == 2500
    with pytest.raises(AsrflowError, match=r"total_steps \(3000\) != trainer.max_steps \(2500\)"):
        total_steps(SchedulerConfig(total_steps=3000), 2500)
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], OptimConfig(), 1e-3)
    with pytest.raises(AsrflowError, match=r"remove scheduler\.total_steps"):
        build_scheduler(opt, recipe(100, total_steps=120))


@pytest.mark.parametrize(
    ("warmup", "max_steps", "expected"),
    [(0.02, 2500, 50), (0.02, 10, 1), (0.0, 100, 1), (500, 2500, 500), (0, 100, 1), (0.5, 3, 2)],
)
def test_warmup_fraction_or_steps(warmup, max_steps, expected):
    assert warmup_steps(SchedulerConfig(warmup=warmup), max_steps) == expected


@pytest.mark.parametrize("warmup", [1.0, 2.5, -1, True, "10"])
def test_bad_warmup(warmup):
    with pytest.raises(AsrflowError, match=r"scheduler\.warmup"):
        warmup_steps(SchedulerConfig(warmup=warmup), 100)


def test_warmup_longer_than_training_is_an_error():
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], OptimConfig(), 1e-3)
    with pytest.raises(AsrflowError, match="before the warmup does"):
        build_scheduler(opt, recipe(100, warmup=100))


@pytest.mark.parametrize(
    ("name", "cls"),
    [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)],
)
def test_build_optimizer(name, cls):
    cfg = OptimConfig(name=name, lr=1.0, weight_decay=0.01, momentum=0.9)
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg, lr=3e-4)
    assert isinstance(opt, cls)
    group = opt.param_groups[0]
    assert group["lr"] == 3e-4  # the lr argument wins (it is scaled_lr(recipe))
    assert group["weight_decay"] == 0.01
    if name != "sgd":
        assert group["betas"] == (0.9, 0.98)


def test_unknown_optimizer():
    with pytest.raises(AsrflowError, match=r"optim\.name"):
        build_optimizer([torch.nn.Parameter(torch.zeros(1))], OptimConfig(name="lion"), 1e-3)


def test_scheduler_steps_once_per_optimizer_step_under_accumulation(tmp_path):
    """Lightning with accumulate_grad_batches=2: max_steps updates, scheduler at its floor."""
    import lightning as L

    r = Recipe(
        model=MODEL,
        trainer=TrainerConfig(max_steps=6, val_check_interval=6, accumulate_grad_batches=2),
        scheduler=SchedulerConfig(warmup=2, min_lr_ratio=0.25),
    )
    seen: list[float] = []

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            seen.append(self.optimizers().param_groups[0]["lr"])
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            opt = build_optimizer(self.parameters(), r.optim, 1.0)
            return {"optimizer": opt, "lr_scheduler": build_scheduler(opt, r)}

    data = torch.utils.data.DataLoader(torch.randn(64, 2), batch_size=4)
    trainer = L.Trainer(
        max_steps=r.trainer.max_steps,
        accumulate_grad_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    model = Tiny()
    trainer.fit(model, data)
    assert trainer.global_step == 6
    assert len(seen) == 12  # 2 batches per optimizer step
    assert seen[0::2] == seen[1::2]  # the LR only changes between updates
    f = warmup_cosine_lambda(2, 6, 0.25)
    assert seen[0::2] == pytest.approx([f(s) for s in range(6)])
    assert model.optimizers().param_groups[0]["lr"] == pytest.approx(0.25)


def _trained(optim: OptimConfig, steps: int = 20) -> torch.Tensor:
    """The weights of a small fixed problem after ``steps`` updates with ``optim``."""
    gen = torch.Generator().manual_seed(0)
    weights = [
        torch.nn.Parameter(torch.randn(8, 4, generator=gen)),
        torch.nn.Parameter(torch.randn(4, generator=gen)),
    ]
    x = torch.randn(16, 8, generator=gen)
    opt = build_optimizer(weights, optim, 1e-2)
    for _ in range(steps):
        opt.zero_grad()
        (x @ weights[0] + weights[1]).pow(2).mean().backward()
        opt.step()
    return torch.cat([w.detach().flatten() for w in weights])


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
def test_optimizer_implementations_compute_the_same_update(name):
    """optim.implementation changes how the update is computed, not what: fused (auto's choice
    on a CPU), foreach and the Python loop (PyTorch's CPU default, asrflow's before) agree to
    rounding, and each reaches the optimizer PyTorch builds."""
    param = [torch.nn.Parameter(torch.zeros(3))]
    built = {
        how: build_optimizer(param, OptimConfig(name=name, momentum=0.5, implementation=how), 1.0)
        for how in ("auto", "fused", "foreach", "for_loop")
    }
    assert built["auto"].defaults["fused"] is True  # a CPU has fused kernels
    assert built["fused"].defaults["fused"] is True
    assert built["foreach"].defaults["foreach"] is True and not built["foreach"].defaults["fused"]
    assert (
        built["for_loop"].defaults["foreach"] is False and not built["for_loop"].defaults["fused"]
    )
    loop = _trained(OptimConfig(name=name, momentum=0.5, implementation="for_loop"))
    for how in ("auto", "fused", "foreach"):
        other = _trained(OptimConfig(name=name, momentum=0.5, implementation=how))
        assert torch.allclose(other, loop, rtol=0, atol=1e-5), (how, (other - loop).abs().max())
        assert not torch.equal(other, _trained(OptimConfig(name=name), steps=0))  # it trained


def test_auto_implementation_leaves_pytorchs_choice_where_no_fused_kernel_fits():
    """auto is fused only where every parameter is floating point on a device PyTorch has fused
    kernels for (a parameter group counts by its tensors); else PyTorch chooses."""
    assert implementation_kwargs("auto", [torch.zeros(2)]) == {"fused": True}
    group = {"params": [torch.zeros(2), torch.zeros(2, dtype=torch.int64)]}
    assert build_optimizer([group], OptimConfig(), 1e-3).defaults["fused"] is None
    assert implementation_kwargs("auto", []) == {}
    assert implementation_kwargs("for_loop", [torch.zeros(2)]) == {"foreach": False}
    with pytest.raises(AsrflowError, match=r"optim\.implementation must be one of auto, fused"):
        implementation_kwargs("fast", [])
