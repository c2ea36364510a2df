"""Optimizer and learning-rate schedule: linear warmup, then cosine decay, stepped per update.

Everything here counts *optimizer steps* (updates), the unit of Lightning's ``max_steps`` and
``global_step``: with ``accumulate_grad_batches = k`` one step takes k batches. The scheduler is
returned with ``interval: "step"``, which Lightning only advances after an optimizer step (never
on an accumulating batch), so the schedule and the trainer agree on where training ends: after
``max_steps`` updates the scheduler has been stepped ``max_steps`` times and the learning rate
sits at ``min_lr_ratio x peak``.

Example::

    optimizer = build_optimizer(model.parameters(), recipe.optim, scaled_lr(recipe))
    return {"optimizer": optimizer, "lr_scheduler": build_scheduler(optimizer, recipe)}
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.optimizer import _get_fused_kernels_supported_devices

from asrflow.errors import AsrflowError
from asrflow.recipe.sections import (
    OPTIMIZER_IMPLEMENTATIONS,
    OPTIMIZERS,
    SCHEDULERS,
    total_steps,
    warmup_steps,
)

if TYPE_CHECKING:
    from asrflow.recipe.sections import OptimConfig, Recipe


@dataclass
class WarmupCosine:
    """LR multiplier at optimizer step ``s`` (the number of scheduler steps taken so far).

    - ``s <= warmup``: linear, ``(s + 1) / (warmup + 1)``: small but non-zero at step 0 (no
      update is wasted at lr 0) and exactly 1 at ``s == warmup``;
    - ``warmup <= s <= total``: cosine from 1 down to ``min_lr_ratio``, reached at ``s == total``;
    - ``s > total``: flat at ``min_lr_ratio``.

    A plain dataclass rather than a closure, so ``LambdaLR.state_dict()`` records its settings.
    """

    warmup: int
    total: int
    min_lr_ratio: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.warmup < self.total:
            raise ValueError(f"need 0 <= warmup < total, got {self.warmup}, {self.total}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")

    def __call__(self, step: int) -> float:
        if step <= self.warmup:
            return (step + 1) / (self.warmup + 1)
        if step >= self.total:
            return self.min_lr_ratio
        progress = (step - self.warmup) / (self.total - self.warmup)
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * 0.5 * (
            1.0 + math.cos(math.pi * progress)
        )


def warmup_cosine_lambda(warmup: int, total: int, min_lr_ratio: float = 0.0) -> WarmupCosine:
    """The multiplier function for ``LambdaLR``; see :class:`WarmupCosine`."""
    return WarmupCosine(warmup, total, min_lr_ratio)


def implementation_kwargs(implementation: str, params: list[torch.Tensor]) -> dict[str, bool]:
    """The keyword that makes a ``torch.optim`` optimizer compute its update the
    ``optim.implementation`` way; ``{}`` leaves PyTorch's own choice (``foreach`` on a GPU,
    ``for_loop`` on a CPU).

    ``auto`` is ``fused`` where PyTorch has fused kernels for every parameter's device and dtype
    (CPU, CUDA, ...; floating point): one kernel per step instead of a Python loop over the
    parameters, a few milliseconds less per step on a CPU (docs/performance.md: training table).
    The arithmetic is the same update; only the rounding may differ, so the weights differ from
    a ``for_loop`` run's at that level, as they do between thread counts.
    """
    if implementation == "auto":
        devices = set(_get_fused_kernels_supported_devices())
        fusable = bool(params) and all(
            p.device.type in devices and p.is_floating_point() for p in params
        )
        return {"fused": True} if fusable else {}
    if implementation == "fused":
        return {"fused": True}
    if implementation == "foreach":
        return {"foreach": True}
    if implementation == "for_loop":
        return {"foreach": False}
    raise AsrflowError(
        f"optim.implementation must be one of {', '.join(OPTIMIZER_IMPLEMENTATIONS)}, "
        f"got {implementation!r}"
    )


def _tensors(params: list[Any]) -> list[torch.Tensor]:
    """The parameters of ``params``: tensors, or param groups (dicts with ``params``)."""
    out: list[torch.Tensor] = []
    for p in params:
        if isinstance(p, dict):
            group = p["params"]
            out.extend([group] if isinstance(group, torch.Tensor) else group)
        else:
            out.append(p)
    return out


def build_optimizer(
    params: Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]],
    optim_cfg: OptimConfig,
    lr: float,
) -> torch.optim.Optimizer:
    """The optimizer named by ``optim.name`` (adamw, adam or sgd) at peak learning rate ``lr``,
    computed as ``optim.implementation`` says (:func:`implementation_kwargs`).

    ``lr`` is passed separately so that callers apply :func:`asrflow.recipe.load.scaled_lr`.
    ``adam`` adds weight decay to the gradient (L2, as ESPnet's ``optim: adam``); ``adamw``
    decouples it. ``sgd`` uses ``momentum`` and ignores ``betas``/``eps``.
    """
    name = optim_cfg.name
    params = list(params)
    how = implementation_kwargs(optim_cfg.implementation, _tensors(params))
    if name == "adamw":
        return torch.optim.AdamW(
            params,
            lr=lr,
            betas=tuple(optim_cfg.betas),
            eps=optim_cfg.eps,
            weight_decay=optim_cfg.weight_decay,
            **how,
        )
    if name == "adam":
        return torch.optim.Adam(
            params,
            lr=lr,
            betas=tuple(optim_cfg.betas),
            eps=optim_cfg.eps,
            weight_decay=optim_cfg.weight_decay,
            **how,
        )
    if name == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=optim_cfg.momentum, weight_decay=optim_cfg.weight_decay, **how
        )
    raise AsrflowError(f"optim.name must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


def build_scheduler(optimizer: torch.optim.Optimizer, recipe: Recipe) -> dict[str, Any]:
    """Lightning's ``lr_scheduler`` config: a ``LambdaLR`` stepped once per optimizer step."""
    cfg = recipe.scheduler
    if cfg.name not in SCHEDULERS:
        raise AsrflowError(
            f"scheduler.name must be one of {', '.join(SCHEDULERS)}, got {cfg.name!r}"
        )
    max_steps = recipe.trainer.max_steps
    total = total_steps(cfg, max_steps)
    warmup = warmup_steps(cfg, max_steps)
    if warmup >= total:
        raise AsrflowError(
            f"scheduler.warmup ({warmup} steps) >= trainer.max_steps ({total}): training would "
            "end before the warmup does; shorten the warmup or train longer"
        )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine_lambda(warmup, total, cfg.min_lr_ratio)
    )
    return {"scheduler": scheduler, "interval": "step", "frequency": 1, "name": "lr"}
