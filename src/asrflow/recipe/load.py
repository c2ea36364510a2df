"""Training recipes: an ESPnet2 model section plus asrflow's training-loop sections.

A recipe YAML holds ESPnet2's model keys at top level, unchanged (``frontend``, ``specaug``,
``normalize``, ``encoder``, ``decoder``, ``ctc_conf``, ``model_conf``, each with its ``*_conf``),
so the model part of an ESPnet2 ``asr_config.yaml`` drops in. Every top-level key that is not one
of asrflow's sections (:data:`SECTIONS`) is ESPnet's and is passed to ``ASRTask`` as is. ESPnet's
*training-loop* keys (``optim_conf``, ``max_epoch``, ``batch_bins``, ...) are refused: asrflow's
own sections replace them and they would otherwise be silently ignored
(:data:`ESPNET_SUPERSEDED_KEYS` says which section to use instead).

Units (Lightning semantics):

- ``trainer.max_steps`` counts *optimizer steps*; with ``accumulate_grad_batches = k`` each step
  consumes k batches per device. The LR scheduler is stepped per optimizer step
  (``interval: "step"``), so it ends where the trainer does (:mod:`asrflow.train.loop.schedule`).
- ``trainer.val_check_interval`` is in optimizer steps too; Lightning counts it in *batches*, so
  :func:`asrflow.train.loop.trainer.trainer_kwargs` multiplies it by ``accumulate_grad_batches``.
- ``batching.max_duration`` is seconds of audio per batch per device; an update sees at most
  :func:`effective_batch_seconds`.

:class:`~asrflow.recipe.sections.Recipe` and its sections are defined in
:mod:`asrflow.recipe.sections` (``batching`` in :mod:`asrflow.recipe.batching`), parsing and
checking in :mod:`asrflow.recipe.checks`, the helpers on nested recipe data in
:mod:`asrflow.recipe.mappings`; this module reads recipe files and sizes a run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import yaml

from asrflow.errors import AsrflowError
from asrflow.recipe.checks import check_recipe, recipe_from_dict
from asrflow.recipe.mappings import deep_merge
from asrflow.recipe.sections import (
    Recipe,
    warmup_steps,
)
from asrflow.types import Pathlike, Seconds


def load_recipe(
    path: Pathlike | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    source: str | None = None,
) -> Recipe:
    """Read a recipe YAML, deep-merge ``overrides`` over it, parse and :func:`check_recipe` it.

    ``path`` may also be recipe data already read (what the train rules pass: the recipe's
    :meth:`Recipe.identity` merged with its :meth:`Recipe.operational` settings).

    Example: ``load_recipe(p, {"trainer": {"max_steps": 10}, "encoder_conf": {"num_blocks": 1}})``.
    """
    if isinstance(path, Mapping):
        data: Any = path
        source = source or "recipe"
    else:
        data = read_recipe_yaml(path)
        source = source or str(path)
    if overrides:
        data = deep_merge(data, overrides)
    recipe = recipe_from_dict(data, source=source)
    check_recipe(recipe, source=source)
    return recipe


def with_overrides(
    recipe: Recipe, overrides: Mapping[str, Any], *, source: str = "recipe"
) -> Recipe:
    """``recipe`` with ``overrides`` deep-merged over its settings, parsed and checked again
    (e.g. a benchmark's or a test's shorter run of a recipe already loaded)."""
    return load_recipe(recipe.to_dict(), overrides, source=source)


def read_recipe_yaml(path: Pathlike) -> Mapping[str, Any]:
    """The data of a recipe YAML (a mapping), or an :class:`AsrflowError` naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise AsrflowError(f"cannot read recipe {path}: {e.strerror}; check the path") from None
    except yaml.YAMLError as e:
        raise AsrflowError(f"recipe {path} is not valid YAML: {e}") from None
    if not isinstance(data, Mapping):
        raise AsrflowError(
            f"recipe {path}: expected a mapping of ESPnet and asrflow keys, got "
            f"{type(data).__name__}"
        )
    return data


AUDIT_SECTIONS = ("batching", "loss", "augmentation")
"""What the batch audit reads of a recipe (its sampler, the loss normalization it warns about,
the speed-perturbed copies it samples): the only sections that rerun it."""


def recipe_sections(
    data: Mapping[str, Any], sections: Collection[str], *, source: str = "recipe"
) -> Recipe:
    """A :class:`Recipe` of only ``sections`` of ``data`` (the others at their defaults, no
    model; not checked: for a step that reads a few sections of a recipe checked elsewhere)."""
    return recipe_from_dict({k: v for k, v in data.items() if k in sections}, source=source)


def effective_batch_seconds(recipe: Recipe) -> Seconds:
    """Most audio per optimizer step: max_duration x devices x num_nodes x accumulation."""
    t = recipe.trainer
    return recipe.batching.max_duration * t.devices * t.num_nodes * t.accumulate_grad_batches


def scaled_lr(recipe: Recipe) -> float:
    """Peak LR: ``optim.lr`` x devices x num_nodes if ``scale_lr_with_devices``, else as given."""
    t = recipe.trainer
    return recipe.optim.lr * (t.devices * t.num_nodes if t.scale_lr_with_devices else 1)


def update_budget(recipe: Recipe) -> dict[str, Any]:
    """What the recipe's training run amounts to, in updates and audio."""
    t = recipe.trainer
    per_step = effective_batch_seconds(recipe)
    return {
        "optimizer_steps": t.max_steps,
        "warmup_steps": warmup_steps(recipe.scheduler, t.max_steps),
        "batches_per_device": t.max_steps * t.accumulate_grad_batches,
        "effective_batch_seconds": per_step,
        "max_audio_seconds": per_step * t.max_steps,
        "peak_lr": scaled_lr(recipe),
    }
