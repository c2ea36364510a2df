"""asrflow.train.spec: a job's recipe parsed and checked once, from its rule's params."""

from __future__ import annotations

import json

import pytest

from asrflow.errors import AsrflowError
from asrflow.recipe.load import AUDIT_SECTIONS, load_recipe
from asrflow.recipe.sections import Recipe
from asrflow.train.spec import spec_from_inputs, spec_from_json, spec_to_json
from tests.train.tiny_espnet import TINY_CTC_MODEL

INPUTS = {"train_0": "t.jsonl.gz", "dev": "d.jsonl.gz", "bpe_model": "b", "tokens": "k"}


def params(recipe: dict, name: str = "mine") -> dict:
    """What runs.recipe_params gives a rule: the canonical settings and the operational ones."""
    parsed = load_recipe(recipe)
    return {"settings": parsed.identity(), "operational": parsed.operational(), "name": name}


def test_the_job_gets_the_recipe_parsed_once_with_every_setting_its_rule_was_given() -> None:
    recipe = {**TINY_CTC_MODEL, "batching": {"max_duration": 7.0, "num_workers": 3}}
    spec = spec_from_inputs("r", INPUTS, normalization={}, recipe=params(recipe))
    assert isinstance(spec.recipe, Recipe)
    assert spec.recipe == load_recipe(recipe)
    assert spec.recipe.batching.max_duration == 7.0 and spec.recipe.batching.num_workers == 3
    assert spec_from_json(spec_to_json(spec)) == spec  # what a rank started by srun reads


def test_a_setting_that_fails_the_checks_in_the_job_names_the_recipe_and_run() -> None:
    """What the DAG never saw (a plan's values, a package's model keys) is checked in the job."""
    given = params(TINY_CTC_MODEL)
    given["settings"]["scheduler"]["warmup"] = given["settings"]["trainer"]["max_steps"]
    with pytest.raises(AsrflowError, match=r"^mine \(run r\): scheduler.warmup"):
        spec_from_inputs("r", INPUTS, normalization={}, recipe=given)


def test_the_batch_audits_params_parse_to_its_sections_alone(tmp_path) -> None:
    """Also under ``recipe: auto``, whose plan sets model keys the audit's params do not hold."""
    full = params({**TINY_CTC_MODEL, "batching": {"max_duration": 5.0}})
    audit = {
        key: {k: v for k, v in full[key].items() if k in AUDIT_SECTIONS}
        for key in ("settings", "operational")
    }
    spec = spec_from_inputs("r", INPUTS, normalization={}, recipe={**audit, "name": "mine"})
    assert spec.recipe.batching.max_duration == 5.0 and spec.recipe.model == {}
    plan = tmp_path / "plan.json"
    choices = [{"key": "batching.max_duration", "value": 9.0}, {"key": "specaug", "value": None}]
    plan.write_text(json.dumps({"choices": choices}), encoding="utf-8")
    inputs = {**INPUTS, "plan": str(plan)}
    spec = spec_from_inputs("r", inputs, normalization={}, recipe={**audit, "name": "auto"})
    assert spec.recipe.batching.max_duration == 9.0 and spec.recipe.model == {}
