"""What a training run reads (:class:`RunSpec`) and how a rule's inputs become one.

Torch-free: :mod:`asrflow.train.run.launch` writes a spec into a job file while the DAG's resources
are worked out, and :mod:`asrflow.train.run.runner` trains it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asrflow.recipe.checks import recipe_from_dict
from asrflow.recipe.inherit import (
    inherit_architecture,
    takes_package_architecture,
)
from asrflow.recipe.load import load_recipe, recipe_sections
from asrflow.recipe.mappings import deep_merge
from asrflow.recipe.plan import apply_plan, read_plan
from asrflow.recipe.sections import SECTION_TYPES, Recipe
from asrflow.types import Pathlike


@dataclass(frozen=True)
class RunSpec:
    """Everything a training run reads; paths are files made by earlier rules."""

    name: str
    recipe: Recipe
    """The recipe as the run trains it, parsed and checked once (:func:`spec_from_inputs`):
    its overrides, plan and starting package's model keys already merged in."""
    train_cuts: Sequence[Pathlike]
    dev_cuts: Pathlike
    bpe_model: Pathlike
    tokens: Pathlike
    normalization: Mapping[str, Any]
    train_weights: Sequence[float] | None = None
    """``runs.<run>.weights``: each corpus's share of every epoch
    (:func:`~asrflow.train.batches.loader.mix_epoch`); ``None``: every cut once per epoch."""
    max_train_cuts: int | None = None
    """Use only the first N train cuts (the smoke run)."""
    max_dev_cuts: int | None = None
    init: Mapping[str, Any] | None = None
    """``runs.<run>.init``: start from existing weights (:mod:`asrflow.train.init.weights`)."""
    recipe_name: str | None = None
    """``runs.<run>.recipe``, for the summary (``recipe`` may be data without a name)."""
    plan: Mapping[str, Any] | None = None
    """The run's plan (``recipe: auto``; :mod:`asrflow.recipe.plan`), already merged into
    ``recipe``: kept for the summary, which records every derived value with its reason."""
    architecture: Mapping[str, Any] | None = None
    """Where the model's keys came from when ``init`` takes them from its package
    (:func:`asrflow.recipe.inherit.inherit_architecture`'s record, already merged into
    ``recipe``): kept for the summary and for the error of weights that do not fit."""
    train_shards: Sequence[Pathlike] = field(default_factory=list)
    """Shard directories of the train corpora (``corpora.<c>.shards``), one per corpus of
    ``train_cuts`` when set: training then reads the audio from them
    (:mod:`asrflow.train.batches.shard_stream`); empty: from the files the cuts name."""


def spec_to_json(spec: RunSpec) -> str:
    """A :class:`RunSpec` as JSON (paths as strings, the recipe as its data), e.g. for a process
    that trains it."""
    data = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
    data["recipe"] = spec.recipe.to_dict()
    return json.dumps(data, default=str)


def spec_from_json(text: str) -> RunSpec:
    """The :class:`RunSpec` :func:`spec_to_json` wrote (its recipe checked when it was made)."""
    data = json.loads(text)
    data["recipe"] = recipe_from_dict(
        data["recipe"], source=_source(data["name"], data.get("recipe_name"))
    )
    return RunSpec(**data)


def _source(name: str, recipe_name: str | None) -> str:
    """How errors name a run's recipe: ``<recipe> (run <run>)``."""
    return f"{recipe_name or 'recipe'} (run {name})"


def spec_from_inputs(
    name: str,
    inputs: Mapping[str, Any],
    *,
    normalization: Mapping[str, Any],
    recipe: Mapping[str, Any],
    weights: Sequence[float] | None = None,
    **extra: Any,
) -> RunSpec:
    """A :class:`RunSpec` from a rule's named inputs (``train_0..n``, ``shards_0..n`` for sharded
    corpora, ``dev``, ``bpe_model``, ``tokens``) and its recipe params
    (:func:`asrflow.runs.recipe_params`); with ``plan`` (``recipe: auto``) the plan's values
    merged over the recipe's, and with an ``init`` that takes the package's architecture the
    package's model keys in place of the recipe's; neither under the keys the overrides set
    (``recipe["explicit"]``). The recipe is parsed and checked here, once for the job. Params
    that hold only some of asrflow's sections are the batch audit's
    (:data:`~asrflow.recipe.load.AUDIT_SECTIONS`): only those are parsed, and not checked as a
    whole recipe (the DAG checked the whole one)."""
    train = [str(inputs[k]) for k in sorted(k for k in inputs if k.startswith("train_"))]
    shards = {int(k.split("_")[1]): str(v) for k, v in inputs.items() if k.startswith("shards_")}
    data = deep_merge(recipe["settings"], recipe["operational"])
    explicit = list(recipe.get("explicit", ()))
    init = extra.get("init")
    inherits = takes_package_architecture(init)
    plan = read_plan(inputs["plan"]) if inputs.get("plan") else None
    if plan is not None:  # its from_package choices are left to inherit_architecture
        data = apply_plan(data, plan, explicit)
    architecture = None
    if inherits:
        data, architecture = inherit_architecture(data, init["model"], explicit)
    source = _source(name, recipe["name"])
    given = {*recipe["settings"], *recipe["operational"]}
    if given >= set(SECTION_TYPES):  # a whole recipe (its canonical form names every section)
        parsed = load_recipe(data, source=source)
    else:  # the batch audit's sections: the plan's other keys are not its to check
        parsed = recipe_sections(data, given, source=source)
    return RunSpec(
        name=name,
        recipe=parsed,
        plan=plan,
        architecture=architecture,
        recipe_name=recipe["name"],
        train_cuts=train,
        dev_cuts=str(inputs.get("dev", "")),  # the batch audit reads no dev cuts
        bpe_model=str(inputs["bpe_model"]),
        tokens=str(inputs["tokens"]),
        normalization=normalization,
        train_weights=weights,
        train_shards=[shards[i] for i in sorted(shards)],
        **extra,
    )
