"""The select_model rule's inputs: each dev evaluation's summary.json and, beside it, its
utterances.csv (for the significance of the average's difference); never a test set; and the
validation reports of the run's corpora (whether dev measures seen speakers only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from asrflow import layout, project, runs
from asrflow.settings import with_defaults

ROOT = Path(__file__).resolve().parents[2]
RUN = "demo_ctc"


def shipped_config() -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    return with_defaults(config)  # as rules/common.smk fills the defaults


def test_dev_evaluation_files_are_every_artifact_on_the_dev_set_only(monkeypatch):
    monkeypatch.chdir(ROOT)  # recipes are found relative to the workflow
    config = shipped_config()
    dev = project.dev_set(config, RUN)
    artifacts = runs.run_artifacts(config, RUN)
    assert len(artifacts) > 1 and any(".ave_" in a for a in artifacts)
    got = runs.dev_evaluation_files(config, RUN, "utterances.csv")
    assert got == [layout.eval_file(RUN, a, dev, "utterances.csv") for a in artifacts]
    assert all(f"/{dev}/" in p and ".test" not in p for p in got)
    assert config["selection"] == {"require_significant": False}


LOAD_RULE = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.iocontainers import Wildcards
from snakemake.settings.types import OutputSettings, ResourceSettings

with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(), snakefile=Path("Snakefile"))
    wf = workflow._workflow
    # as after validation has run: the validate_corpus checkpoint's outputs exist
    validate = wf.get_rule("validate_corpus")
    for corpus in wf.config["corpora"]:
        wf.checkpoints.created_output.update(validate.expand_output({"corpus": corpus})[0])
    rule = wf.get_rule("select_model")
    wildcards = Wildcards(fromdict={"run": sys.argv[1]})
    inputs = {name: rule.input[i](wildcards) for name, (i, _) in rule.input._names.items()}
    params = {name: rule.params[i] for name, (i, _) in rule.params._names.items()}
    params = {k: v(wildcards) if callable(v) else v for k, v in params.items()}
    print(json.dumps({"input": inputs, "params": params}))
"""


def test_the_run_is_checked_against_the_validation_of_every_corpus_it_meets(monkeypatch):
    monkeypatch.chdir(ROOT)
    config = shipped_config()
    config["corpora"]["other"] = dict(config["corpora"]["demo"])
    config["evaluation"]["extra_sets"] = ["other.test"]
    config["runs"]["r"] = dict(config["runs"][RUN], corpora=["demo"], dev="other")
    assert project.test_sets(config, "r") == ["demo.test", "other.test"]
    assert project.selection_corpora(config, "r") == ["demo", "other"]


def test_selection_takes_no_test_set_of_the_runs_own_train_split(monkeypatch):
    """An extra eval set of train data cannot hold unheard speakers: it is not among the sets
    selection compares dev against, so adding it reruns no selection."""
    monkeypatch.chdir(ROOT)
    config = shipped_config()
    config["corpora"]["other"] = dict(config["corpora"]["demo"])
    config["evaluation"]["extra_sets"] = ["demo.train", "other.train"]
    config["runs"]["r"] = dict(config["runs"][RUN], corpora=["demo"])
    assert "demo.train" in project.test_sets(config, "r")
    assert project.held_out_test_sets(config, "r") == ["demo.test", "other.train"]


def test_the_select_rule_reads_the_utterances_csv_beside_each_dev_summary():
    """The rule as the Snakefile defines it (parsed in a fresh process; no DAG is built)."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD_RULE, RUN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    rule = json.loads(out.stdout.strip().splitlines()[-1])
    summaries, utterances = rule["input"]["evaluations"], rule["input"]["utterances"]
    assert [Path(p).name for p in summaries] == ["summary.json"] * len(summaries)
    assert [str(Path(p).parent) for p in utterances] == [str(Path(p).parent) for p in summaries]
    assert [Path(p).name for p in utterances] == ["utterances.csv"] * len(summaries)
    assert rule["input"]["validation"] == [layout.validation_report("demo", "json")]
    assert rule["params"] == {
        "dev_set": "demo.dev",
        "require_significant": False,
        "train_corpora": ["demo"],
        "test_sets": ["demo.test"],
    }
