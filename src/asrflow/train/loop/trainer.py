"""Lightning's Trainer from a recipe: asrflow's units translated into its arguments.

Everything here needs (or may need) torch; :mod:`asrflow.recipe.load` stays torch-free so that
the DAG can read recipes without it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from asrflow.recipe.sections import Recipe

log = logging.getLogger(__name__)


def resolve_precision(precision: str, accelerator: str = "auto") -> str:
    """``auto`` -> ``bf16-mixed`` on a CUDA device with bf16, else ``32-true``; others unchanged.

    (bf16 on a CPU without avx512_bf16/AMX is ~10x slower than fp32, hence fp32 there.)
    """
    if precision != "auto":
        return precision

    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return "bf16-mixed"
    return "32-true"


def trainer_kwargs(recipe: Recipe) -> dict[str, Any]:
    """Keyword arguments for ``lightning.Trainer`` with asrflow's units translated.

    ``val_check_interval`` becomes batches (Lightning's unit) and ``check_val_every_n_epoch`` is
    ``None`` so that validation runs every that many batches across epoch boundaries. An interval
    longer than the run is cut to ``max_steps`` (one validation at the end, e.g. for short test
    runs made with an override of ``max_steps``), so best-model checkpoints always exist.
    """
    t = recipe.trainer
    every = min(t.val_check_interval, t.max_steps)
    if every < t.val_check_interval:
        log.info(
            "trainer.val_check_interval (%d) > trainer.max_steps (%d): validating once, at the end",
            t.val_check_interval,
            t.max_steps,
        )
    return {
        "max_steps": t.max_steps,
        "val_check_interval": every * t.accumulate_grad_batches,
        "check_val_every_n_epoch": None,
        "precision": resolve_precision(t.precision, t.accelerator),
        "accumulate_grad_batches": t.accumulate_grad_batches,
        "gradient_clip_val": t.gradient_clip_val,
        "devices": t.devices,
        "num_nodes": t.num_nodes,
        "accelerator": t.accelerator,
    }
