"""Seed replicas in the config: ``runs.<run>.seeds`` expands to one ordinary run per seed
(asrflow.replicas), checked by the schema and with one-line errors."""

from __future__ import annotations

import copy

import pytest

from asrflow import config_check, project, runs
from asrflow.errors import AsrflowError
from asrflow.replicas import expand_replicas, replica_name, replica_runs
from asrflow.settings import with_defaults
from tests.e2e import REPO


def config(**runs_: dict) -> dict:
    base = {"corpora": ["demo"], "tokenizer": "tok", "recipe": "demo_conformer"}
    return {
        "corpora": {"demo": {"source": "synthetic"}},
        "tokenizers": {"tok": {"corpus": "demo"}},
        "runs": {name: {**base, **r} for name, r in runs_.items()},
    }


def test_a_run_with_seeds_becomes_one_run_per_seed_in_place() -> None:
    cfg = config(
        first={},
        base={"seeds": [0, 2], "overrides": {"trainer": {"max_steps": 10}, "optim": {"lr": 1.0}}},
        last={"seeds": None},
    )
    before = copy.deepcopy(cfg)
    out = expand_replicas(cfg)
    assert cfg == before  # the input is left alone
    assert list(out["runs"]) == ["first", "base-seed0", "base-seed2", "last"]
    assert replica_name("base", 2) == "base-seed2"
    replica = out["runs"]["base-seed2"]
    assert replica["overrides"] == {
        "trainer": {"max_steps": 10, "seed": 2},
        "batching": {"seed": 2},
        "optim": {"lr": 1.0},
    }
    assert replica["replica_of"] == "base" and replica["seed"] == 2
    assert "seeds" not in replica and "seeds" not in out["runs"]["last"]
    assert out["runs"]["first"] == cfg["runs"]["first"]
    assert replica_runs(out) == {
        "base-seed0": {"replica_of": "base", "seed": 0},
        "base-seed2": {"replica_of": "base", "seed": 2},
    }
    assert replica_runs(expand_replicas(config(plain={}))) == {}
    config_check.check_config(out)


def test_each_replica_trains_with_its_seed(monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the recipe is read from config/recipes/
    out = expand_replicas(with_defaults(config(base={"seeds": [0, 1]})))  # as the workflow reads it
    seeds = []
    for name in ("base-seed0", "base-seed1"):
        settings = runs.recipe_params(out, name)["settings"]
        seeds.append((settings["trainer"]["seed"], settings["batching"]["seed"]))
    assert seeds == [(0, 0), (1, 1)]
    assert project.eval_sets(out, "base-seed1") == ["demo.dev", "demo.test"]


def test_a_baseline_naming_a_replicated_run_points_at_its_first_replica() -> None:
    cfg = {**config(other={}, base={"seeds": [3, 1]}), "report": {"baseline_run": "base"}}
    out = expand_replicas(cfg)
    assert out["report"]["baseline_run"] == "base-seed3"  # the first in the config's order
    config_check.check_config(out)
    cfg["report"]["baseline_run"] = "base-seed1"  # a replica by its name stays
    assert expand_replicas(cfg)["report"]["baseline_run"] == "base-seed1"


@pytest.mark.parametrize(
    ("runs_", "message"),
    [
        (
            {"base": {"seeds": [0, 1]}, "base-seed1": {}},
            r"^runs\.base\.seeds: its replica 'base-seed1' has the name of another run; rename",
        ),
        (
            {"base-seed0": {}, "base": {"seeds": [0]}},
            r"^runs\.base\.seeds: its replica 'base-seed0' has the name of another run",
        ),
        (
            {"base": {"seeds": [0], "overrides": {"trainer": {"seed": 4}}}},
            r"^runs\.base: seeds and overrides\.trainer\.seed both set the seed; drop",
        ),
        (
            {"base": {"seeds": [0], "overrides": {"batching": {"seed": 4}}}},
            r"^runs\.base: seeds and overrides\.batching\.seed both set the seed",
        ),
        ({"base": {"seeds": [1, 1]}}, r"^runs\.base\.seeds: each seed once, got \[1, 1\]"),
        ({"base": {"seeds": []}}, r"^runs\.base\.seeds: a list of non-negative integers"),
        ({"base": {"seeds": [-1]}}, r"^runs\.base\.seeds: a list of non-negative integers"),
    ],
)
def test_bad_seeds_are_one_line_naming_the_run(runs_: dict, message: str) -> None:
    with pytest.raises(AsrflowError, match=message) as err:
        expand_replicas(config(**runs_))
    assert len(str(err.value).splitlines()) == 1


def test_the_schema_checks_seeds() -> None:
    assert with_defaults(config(base={}))["runs"]["base"]["seeds"] is None  # default: no replicas
    assert with_defaults(config(base={"seeds": [2, 0]}))["runs"]["base"]["seeds"] == [2, 0]
    for bad, fragment in (
        ([0, 0], "non-unique"),
        ([], "should be non-empty"),
        ([-1], "less than the minimum"),
        ([0.5], "is not of type 'integer'"),
    ):
        with pytest.raises(AsrflowError, match=r"runs\.base\.seeds") as err:
            with_defaults(config(base={"seeds": bad}))
        assert fragment in str(err.value)
