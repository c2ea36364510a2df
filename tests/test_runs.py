"""asrflow.runs: every run's recipe checked with the config, and what a bad one is blamed on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from asrflow import runs
from asrflow.errors import AsrflowError
from tests.configs import config_with_runs

MODEL = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 16, "num_blocks": 2},
    "model_conf": {"ctc_weight": 1.0},
    "frontend_conf": {"fs": 8000},
}


@pytest.fixture
def recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write ``config/recipes/<name>.yaml`` under a temporary workflow directory (the recipes
    are read relative to it, as Snakemake runs the workflow from its root)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config" / "recipes").mkdir(parents=True)

    def write(name: str, data: dict[str, Any]) -> None:
        (tmp_path / "config" / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(data))

    return write


def refusal(config: dict[str, Any]) -> str:
    with pytest.raises(AsrflowError) as info:
        runs.check_recipes(config)
    return str(info.value)


def test_good_recipes_pass_and_a_misspelt_component_names_the_run_and_file(recipes) -> None:
    recipes("good", MODEL)
    recipes("typo", {**MODEL, "encoder": "conformerr"})
    runs.check_recipes(config_with_runs(a={"recipe": "good"}))
    message = refusal(config_with_runs(a={"recipe": "good"}, b={"recipe": "typo"}))
    assert message.startswith("config/recipes/typo.yaml (run b): encoder: ESPnet has no encoder")
    assert "conformer, transformer" in message and "\n" not in message


def test_an_override_typo_names_the_override_key_not_the_recipe(recipes) -> None:
    """Issue 30: it named config/recipes/<recipe>.yaml, which has no such key."""
    recipes("good", MODEL)
    config = config_with_runs(a={"recipe": "good", "overrides": {"trainer": {"max_stepz": 10}}})
    message = refusal(config)
    assert "runs.a.overrides.trainer.max_stepz" in message
    assert "config/recipes" not in message
    bad_value = config_with_runs(a={"recipe": "good", "overrides": {"optim": {"lr": 0}}})
    assert refusal(bad_value) == "run a: runs.a.overrides.optim.lr must be > 0, got 0.0"


def test_a_missing_recipe_names_the_run_key(recipes) -> None:
    message = refusal(config_with_runs(a={"recipe": "nope"}))
    assert message.startswith("runs.a.recipe: cannot read recipe config/recipes/nope.yaml")


def test_the_smoke_runs_recipe_is_checked_too(recipes) -> None:
    recipes("good", MODEL)
    config = config_with_runs(a={"recipe": "good"})
    config["smoke"]["max_steps"] = 1  # its warmup (1 step) would not end before training does
    message = refusal(config)
    assert message.startswith("config/recipes/good.yaml (run a as its smoke run trains it): ")
    assert "scheduler.warmup" in message


def test_a_bad_sampling_rate_names_the_recipe(recipes) -> None:
    recipes("fs", {**MODEL, "frontend_conf": {"fs": "fast"}})
    message = refusal(config_with_runs(a={"recipe": "fs"}))
    assert message.startswith("config/recipes/fs.yaml (run a): frontend_conf.fs: 'fast'")


def test_frontend_rates_reads_only_the_rate(recipes) -> None:
    """Issue 30: the validation's params parsed every run's recipe, so any recipe error failed
    the DAG inside rule validate_corpus of every corpus; the recipes are checked with the
    config now (check_recipes), and frontend_rates reads the rate alone."""
    recipes("bad", {**MODEL, "optim": {"lr": -1}})
    config = config_with_runs(
        a={"recipe": "bad"}, b={"recipe": "bad", "overrides": {"frontend_conf": {"fs": "16k"}}}
    )
    assert dict(runs.frontend_rates(config, "c")) == {"a": 8000, "b": 16000}


def test_an_auto_run_gets_its_plan_and_the_keys_its_overrides_set(recipes) -> None:
    recipes("named", MODEL)
    config = config_with_runs(
        a={"recipe": "auto", "overrides": {"trainer": {"seed": 2}, "frontend_conf": {"fs": 16000}}},
        b={"recipe": "named"},
    )
    runs.check_recipes(config)  # the built-in base is a recipe by itself
    assert runs.plan_inputs(config, "a") == {"plan": "results/runs/a/plan/plan.json"}
    assert runs.plan_inputs(config, "b") == {}
    train, smoke = runs.recipe_params(config, "a"), runs.recipe_params(config, "a", smoke=True)
    assert {"trainer.seed", "frontend_conf.fs", "trainer.devices"} <= set(train["explicit"])
    assert "trainer.max_steps" not in train["explicit"]
    assert "trainer.max_steps" in smoke["explicit"]  # the smoke run's few steps beat the plan
    # a named recipe's params are as they were (no key added: nothing reruns)
    assert "explicit" not in runs.recipe_params(config, "b")
    assert runs.plan_params(config, "a") == {
        "recipe": "auto",
        "explicit": ["frontend_conf.fs", "trainer.seed"],
        "synthetic": True,  # config_with_runs's one corpus is synthetic
    }


def test_a_fine_tuning_run_takes_its_packages_model_config_and_rate(recipes, tmp_path) -> None:
    """Issue 32: the package's config.yaml is an input (an edit reruns the run), the plan leaves
    the model keys to it, the overrides are explicit, and validation hears the package's rate."""
    recipes("named", MODEL)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.pth").write_bytes(b"")
    (pkg / "config.yaml").write_text(yaml.safe_dump({**MODEL, "frontend_conf": {"fs": 22050}}))
    made_later = "results/runs/base/export/last"
    config = config_with_runs(
        a={"recipe": "auto", "tokenizer": "init", "init": {"model": str(pkg)}},
        b={"recipe": "named", "init": {"model": str(pkg), "architecture": "recipe"}},
        c={"recipe": "named", "init": {"model": made_later}, "overrides": {"trainer": {"seed": 1}}},
    )
    assert runs.init_inputs(config, "a") == {
        "init_weights": str(pkg / "model.pth"),
        "init_config": str(pkg / "config.yaml"),
    }
    assert runs.init_inputs(config, "b") == {"init_weights": str(pkg / "model.pth")}
    assert runs.init_inputs(config, "c") == {"init_weights": made_later}  # another run's export
    assert "encoder_conf" in runs.plan_params(config, "a")["inherited"]
    # the plan knows what the run starts from; the LR of a model from elsewhere is not known
    assert runs.plan_params(config, "a")["lineage"] == {"parent": str(pkg), "generation": 0}
    assert runs.parent_summary(config, "a") == {}
    assert "trainer.seed" in runs.recipe_params(config, "c")["explicit"]
    assert "explicit" not in runs.recipe_params(config, "b")
    # a: the package's 22.05 kHz; b: the recipe's 8 kHz; c: not known until base exports
    assert dict(runs.frontend_rates(config, "c")) == {"a": 22050, "b": 8000}


def test_only_a_run_with_adapters_exports_against_its_start_weights(recipes) -> None:
    """A LoRA run's export also writes the change from its start weights (the rule's input
    init_weights); a full fine-tune and a run from scratch do not depend on them at export."""
    recipes("named", MODEL)
    config = config_with_runs(
        scratch={"recipe": "named"},
        full={"recipe": "named", "init": {"model": "results/runs/base/export/last"}},
        lora={
            "recipe": "named",
            "init": {"model": "results/runs/base/export/last", "adapter": {"rank": 2}},
        },
    )
    assert [runs.trains_adapters(config, r) for r in ("scratch", "full", "lora")] == [
        False,
        False,
        True,
    ]


def test_an_auto_runs_rate_follows_the_corpus_unless_overridden(recipes) -> None:
    config = config_with_runs(
        a={"recipe": "auto"}, b={"recipe": "auto", "overrides": {"frontend_conf": {"fs": 16000}}}
    )
    assert dict(runs.frontend_rates(config, "c")) == {"b": 16000}


def test_a_chain_of_fine_tuning_runs_knows_each_parent_and_its_history() -> None:
    """Issue 32: the plan of a run with init.run reads its parent's train summary (its peak LR),
    and a parent that was itself fine-tuned makes the child a second refinement."""
    config = config_with_runs(
        base={"recipe": "auto"},
        week2={"recipe": "auto", "init": {"run": "base"}},
        week3={"recipe": "auto", "init": {"run": "week2"}},
        named={"recipe": "r", "init": {"run": "base"}},
    )
    assert "lineage" not in runs.plan_params(config, "base")
    assert runs.plan_params(config, "week2")["lineage"] == {"parent": "base", "generation": 0}
    assert runs.plan_params(config, "week3")["lineage"] == {"parent": "week2", "generation": 1}
    assert runs.parent_summary(config, "week3") == {
        "parent_summary": "results/runs/week2/train/summary.json"
    }
    assert runs.parent_summary(config, "base") == {}
    assert runs.parent_summary(config, "named") == {}  # no plan: a named recipe trains as written
    # a tokenizer neither the package's nor the parent's: the output layers start fresh
    config = config_with_runs(
        base={"recipe": "auto"},
        fresh={"recipe": "auto", "tokenizer": "t2", "init": {"run": "base"}},
        kept={"recipe": "auto", "tokenizer": "init", "init": {"run": "base"}},
        checked={"tokenizer": "t2", "init": {"model": "pkg", "reuse_tokenizer": True}},
        other={"tokenizer": "t2", "init": {"model": "pkg"}},
    )
    new = {
        n: runs.lineage_params(config, n).get("new_vocabulary") for n in list(config["runs"])[1:]
    }
    assert new == {"fresh": True, "kept": None, "checked": None, "other": True}


def test_a_runs_recipe_is_parsed_once_per_dag_build_until_its_file_or_overrides_change(
    recipes, tmp_path
) -> None:
    """Every rule's params and inputs ask for the same run's recipe: one parse serves them all,
    and a changed file or override is parsed anew."""
    recipes("good", MODEL)
    config = config_with_runs(a={"recipe": "good"})
    first = runs.run_recipe(config, "a")
    assert runs.run_recipe(config, "a") is first
    assert runs.run_recipe(config, "a", smoke=True) is not first
    config["runs"]["a"]["overrides"] = {"optim": {"lr": 0.5}}
    assert runs.run_recipe(config, "a").optim.lr == 0.5
    recipes("good", {**MODEL, "encoder_conf": {"output_size": 8, "num_blocks": 2}})
    path = tmp_path / "config" / "recipes" / "good.yaml"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert runs.run_recipe(config, "a").model["encoder_conf"]["output_size"] == 8
