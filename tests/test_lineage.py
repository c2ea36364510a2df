from __future__ import annotations

import pytest

from asrflow import runs
from asrflow.errors import AsrflowError
from asrflow.lineage import with_init_runs


def _runs_config(**inits) -> dict:
    """A config with runs a, b, c (c with seed replicas) and the given ``init`` per run."""
    run = {"corpora": ["demo"], "tokenizer": "t", "recipe": "x"}
    runs_ = {name: dict(run) for name in ("a", "b", "c-seed0", "c-seed1")}
    runs_["c-seed0"]["replica_of"] = runs_["c-seed1"]["replica_of"] = "c"
    for name, init in inits.items():
        runs_[name]["init"] = init
    return {"corpora": {"demo": {"source": "synthetic"}}, "runs": runs_}


def test_init_run_starts_from_the_parents_selected_package() -> None:
    config = _runs_config(b={"run": "a", "exclude": ["ctc.*"]})
    out = with_init_runs(config)
    assert out["runs"]["b"]["init"] == {
        "run": "a",
        "exclude": ["ctc.*"],
        "model": "results/runs/a/selected",
    }
    assert "init" not in out["runs"]["a"] and "model" not in config["runs"]["b"]["init"]
    assert runs.has_baseline(out, "b")
    inputs = runs.init_inputs(out, "b")
    assert inputs == {
        "init_weights": "results/runs/a/selected/model.pth",
        "init_config": "results/runs/a/selected/config.yaml",
    }
    out["runs"]["b"]["init"]["architecture"] = "recipe"
    assert runs.init_inputs(out, "b") == {"init_weights": "results/runs/a/selected/model.pth"}


@pytest.mark.parametrize(
    ("inits", "message"),
    [
        ({"b": {"run": "nope"}}, r"runs\.b\.init\.run: unknown run 'nope'; choose one of a, c-"),
        ({"b": {"run": "c"}}, r"runs\.b\.init\.run: .*seed replicas: name one of c-seed0, c-seed1"),
        ({"a": {"run": "a"}}, r"runs\.a\.init\.run: a run cannot start from itself"),
        ({"a": {"run": "b"}, "b": {"run": "a"}}, r"in a cycle \((a -> b -> a|b -> a -> b)\)"),
    ],
)
def test_init_run_names_the_key_and_what_to_do(inits, message) -> None:
    with pytest.raises(AsrflowError, match=message):
        with_init_runs(_runs_config(**inits))


def test_init_run_chains_resolve_each_to_its_own_parent() -> None:
    out = with_init_runs(_runs_config(b={"run": "a"}, **{"c-seed0": {"run": "b"}}))
    assert out["runs"]["c-seed0"]["init"]["model"] == "results/runs/b/selected"
    assert out["runs"]["b"]["init"]["model"] == "results/runs/a/selected"
