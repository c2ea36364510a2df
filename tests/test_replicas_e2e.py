"""Seed replicas end to end (issue 14, section 3; marked slow): a config with ``seeds: [0, 1]``
on the tiny DAG trains two replicas, each with its seed, and the report aggregates them.

Kept as small as the DAG allows: 8 steps, one checkpoint criterion with k=1 (artifacts ``last``
and ``valid.loss.best``), greedy decoding, a two-step smoke run.

The corpus is sharded (issue 16: ``corpora.tiny.shards``), so the batch audit, the smoke run and
both replicas read their train audio from Lhotse Shar shards, with two loader workers.
"""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml

from asrflow.data.shards import read_index
from asrflow.hashing import sha256_file
from tests.e2e import dry_run, rule_counts, snakemake, write_config
from tests.tiny_dag import CONFIG, TINY_RECIPE, prepared_tiny

pytestmark = pytest.mark.slow

RUN = "tiny_ctc"
REPLICAS = [f"{RUN}-seed0", f"{RUN}-seed1"]


def _config() -> dict:
    config = copy.deepcopy(CONFIG)
    config["runs"][RUN]["seeds"] = [0, 1]
    config["corpora"]["tiny"]["shards"] = {"shard_size": 6}
    config["evaluation"] = {"decoding": {"mode": "greedy_ctc"}}
    config["smoke"] = {"max_train_cuts": 8, "max_dev_cuts": 2, "max_steps": 2}
    return config


def _recipe() -> dict:
    recipe = copy.deepcopy(TINY_RECIPE)
    recipe["trainer"] = {**recipe["trainer"], "max_steps": 8, "val_check_interval": 4}
    recipe["best_model_criterion"] = [["valid/loss", 1, "min"]]
    recipe["batching"] = {**recipe["batching"], "num_workers": 2}
    recipe["diagnostics"] = {"num_decode_utterances": 1}
    return recipe


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    workdir = prepared_tiny(tmp_path_factory)
    write_config(workdir, _config())
    (workdir / "config/recipes").mkdir(parents=True, exist_ok=True)
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(_recipe()))
    # both replicas' train jobs are in the first DAG: a cluster runs them side by side
    planned = rule_counts(dry_run(workdir))
    snakemake(workdir)
    return workdir, planned


def test_both_replicas_are_planned_at_once_and_train_with_their_seeds(replicated):
    workdir, planned = replicated
    assert planned["train"] == 2 and planned["smoke_train"] == 2
    summaries = {}
    for seed, run in enumerate(REPLICAS):
        summary = json.loads((workdir / f"results/runs/{run}/train/summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == 8
        settings = summary["recipe_settings"]
        assert settings["trainer"]["seed"] == seed and settings["batching"]["seed"] == seed
        assert (workdir / f"results/work/{run}").is_dir()  # each its own work directory
        summaries[run] = summary
    assert len({s["hashes"]["recipe"] for s in summaries.values()}) == 2
    weights = {
        sha256_file(workdir / f"results/runs/{run}/export/last/model.pth") for run in REPLICAS
    }
    assert len(weights) == 2  # different seeds, different weights
    assert not (workdir / f"results/runs/{RUN}").exists()  # no run under the plain name


def test_the_audit_the_smoke_run_and_training_read_the_shards(replicated):
    workdir, planned = replicated
    assert planned["shard_split"] == 1  # one copy for both replicas
    shards = workdir / "results/data/tiny/shards/train"
    index = read_index(shards)
    assert len(index["shards"]) >= 4  # 2 workers of one rank, two shards each at least
    for run in REPLICAS:
        summary = json.loads((workdir / f"results/runs/{run}/train/summary.json").read_text())
        assert summary["hashes"]["train_shards"] == {
            "results/data/tiny/shards/train": sha256_file(shards / "shards.json")
        }
        assert summary["num_train_cuts"] == index["num_cuts"]
        # on shards the workers deal them: a setting of the recipe the summary names
        assert summary["recipe_settings"]["batching"]["num_workers"] == 2
        identity = json.loads((workdir / f"results/work/{run}/identity.json").read_text())
        assert identity["shard_sizes"] == {"results/data/tiny/shards/train": 6}
        audit = json.loads((workdir / f"results/runs/{run}/audit/batches.json").read_text())
        assert audit["source"] == "shards" and audit["num_cuts"] == index["num_cuts"]
        smoke = json.loads((workdir / f"results/runs/{run}/smoke/summary.json").read_text())
        assert smoke["status"] == "completed", smoke
        record = json.loads(
            (workdir / f"results/runs/{run}/train/summary.json.prov.json").read_text()
        )
        assert "results/data/tiny/shards/train" in json.dumps(
            [record["inputs"], record["directories"]]
        )


def test_the_report_lists_each_replica_and_aggregates_them(replicated):
    workdir, _ = replicated
    report = workdir / "results/report"
    df = pd.read_csv(report / "comparison.csv", dtype={"seed": "Int64"})
    selected = df[df["selected"] & df["current"]]
    assert sorted(selected["run"].unique()) == REPLICAS
    assert set(df["replica_of"]) == {RUN}
    assert sorted(df["seed"].unique()) == [0, 1]
    seed1 = selected[selected["run"] == REPLICAS[1]].iloc[0]
    assert seed1["baseline_run"] == REPLICAS[0]  # the first replica: what changed is the seed
    assert seed1["changed_vs_baseline"] == "recipe: batching.seed 0 -> 1, trainer.seed 0 -> 1"
    table = pd.read_csv(report / "replicas.csv").set_index("eval_set")
    assert sorted(table.index) == ["tiny.dev", "tiny.test"]
    for eval_set, row in table.iterrows():
        wers = selected.loc[selected["eval_set"] == eval_set, "wer"]
        assert row["run"] == RUN and row["replicas"] == 2 and row["seeds"] == "0, 1"
        assert row["wer_mean"] == pytest.approx(wers.mean())
        assert row["wer_sd"] == pytest.approx(wers.std(ddof=1))
        assert (row["wer_min"], row["wer_max"]) == (wers.min(), wers.max())
        assert row["wer_mean_ci_low"] <= row["wer_mean"] <= row["wer_mean_ci_high"]
        assert row["wer_diff_vs_baseline"] == 0.0  # the baseline's own replicas
    assert "## Seed replicas" in (report / "comparison.md").read_text()
    assert "<h2>Seed replicas</h2>" in (report / "comparison.html").read_text()
