"""Seed replicas in the report (issue 14, section 3): each replica a row of the comparison, and
per replicated run and eval set their mean, spread and interval; comparisons with a replicated
baseline use all its replicas."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from asrflow.evaluate.paired import replicated_difference
from asrflow.report.comparison import NONE, comparison_table
from asrflow.report.replicas import SUMMARY_COLUMNS, replica_table
from asrflow.report.stages import build_report
from asrflow.report.tables import report_html, report_markdown
from tests.report.test_comparison import _errors, eval_summary, train_summary

BASE_DIFF = ["wer_diff_vs_baseline", "wer_diff_vs_baseline_ci_low", "wer_diff_vs_baseline_ci_high"]

REPLICAS = {
    "base-seed0": {"replica_of": "base", "seed": 0},
    "base-seed1": {"replica_of": "base", "seed": 1},
    "cand-seed0": {"replica_of": "cand", "seed": 0},
    "cand-seed1": {"replica_of": "cand", "seed": 1},
    "cand-seed2": {"replica_of": "cand", "seed": 2},
}


def _replicated_runs():
    """``base`` (2 replicas: 20 and 24 % WER), ``cand`` (3 replicas, the third failed: 10 and
    14 %) and a plain run ``solo`` (30 %), each selecting ``last`` on demo.dev: 10 utterances of
    10 words, the errors spread over the first ones."""
    wrong = {"base-seed0": 20, "base-seed1": 24, "cand-seed0": 10, "cand-seed1": 14, "solo": 30}
    train = {run: train_summary(run) for run in ["solo", *REPLICAS]}
    train["cand-seed2"] = {"run": "cand-seed2", "status": "failed", "error": "diverged"}
    evals, selections, errors = [], {}, {}
    for run, total in wrong.items():
        errs = [min(10, max(0, total - 10 * i)) for i in range(10)]
        for artifact, extra in (("last", 0), ("valid.loss.best", 1)):
            evals.append(eval_summary(run, artifact, (total + extra) / 100))
            errors[(run, artifact, "demo.dev")] = _errors(np.array(errs) + extra)
        selections[run] = {"run": run, "selected": "last"}
    return train, evals, selections, errors


def test_each_replica_is_a_row_that_says_whose_replica_it_is():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(train, evals, selections, (), errors, replicas=REPLICAS)
    rows = df.set_index(["run", "artifact"])
    assert rows.loc[("cand-seed1", "last"), "replica_of"] == "cand"
    assert rows.loc[("cand-seed1", "last"), "seed"] == 1
    assert rows.loc[("cand-seed2", NONE), "seed"] == 2  # the failed replica too
    assert pd.isna(rows.loc[("solo", "last"), "replica_of"])
    assert pd.isna(rows.loc[("solo", "last"), "seed"])
    assert str(df["seed"].dtype) == "Int64"


def test_the_replica_table_gives_mean_spread_and_interval_of_the_selected_artifacts():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(train, evals, selections, (), errors, replicas=REPLICAS)
    table = replica_table(df, errors, REPLICAS, "base-seed0")
    assert list(table.columns) == list(SUMMARY_COLUMNS)
    assert table[["run", "eval_set"]].values.tolist() == [
        ["base", "demo.dev"],
        ["cand", "demo.dev"],
    ]
    base, cand = (table.iloc[i] for i in range(2))
    assert (base["replicas"], base["seeds"], base["selected"]) == (2, "0, 1", "last x2")
    assert base["wer_mean"] == pytest.approx(0.22)
    assert base["wer_sd"] == pytest.approx(np.std([0.20, 0.24], ddof=1))  # 2.83 points
    assert (base["wer_min"], base["wer_max"]) == (0.20, 0.24)
    assert base["wer_mean_ci_low"] < 0.22 < base["wer_mean_ci_high"]
    assert pd.isna(base["missing"])
    # the baseline's own run: 0 [0, 0]; the other its mean minus the baseline's mean
    assert base["baseline_run"] == "base" and base[BASE_DIFF].tolist() == [0.0, 0.0, 0.0]
    assert cand["replicas"] == 2 and cand["missing"] == "cand-seed2"
    assert cand["wer_mean"] == pytest.approx(0.12)
    ours = [errors[(r, "last", "demo.dev")] for r in ("cand-seed0", "cand-seed1")]
    theirs = [errors[(r, "last", "demo.dev")] for r in ("base-seed0", "base-seed1")]
    assert cand[BASE_DIFF].tolist() == pytest.approx(list(replicated_difference(ours, theirs)))
    assert cand["wer_diff_vs_baseline"] == pytest.approx(0.12 - 0.22)
    # one replica left: no spread
    lone = replica_table(df[df["run"] != "cand-seed1"], errors, REPLICAS, "base-seed0")
    assert lone.iloc[1]["replicas"] == 1 and pd.isna(lone.iloc[1]["wer_sd"])
    assert lone.iloc[1]["missing"] == "cand-seed1, cand-seed2"


def test_a_replicated_baseline_counts_with_all_its_replicas():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(
        train, evals, selections, (), errors, baseline_run="base-seed0", replicas=REPLICAS
    )
    rows = df.set_index(["run", "artifact"])
    base = [errors[(r, "last", "demo.dev")] for r in ("base-seed0", "base-seed1")]
    for run, wer in (("solo", 0.30), ("cand-seed0", 0.10), ("base-seed1", 0.24)):
        expected = replicated_difference([errors[(run, "last", "demo.dev")]], base)
        assert rows.loc[(run, "last"), BASE_DIFF].tolist() == pytest.approx(list(expected))
        assert expected[0] == pytest.approx(wer - 0.22)  # against the baseline's mean
    assert rows.loc[("cand-seed0", "valid.loss.best"), BASE_DIFF].isna().all()  # not selected
    # what changed is named against the baseline's first replica
    assert set(df.loc[df["current"], "baseline_run"]) == {"base-seed0"}


def test_a_plain_baseline_against_a_replicated_run():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(
        train, evals, selections, (), errors, baseline_run="solo", replicas=REPLICAS
    )
    table = replica_table(df, errors, REPLICAS, "solo").set_index("run")
    ours = [errors[(r, "last", "demo.dev")] for r in ("cand-seed0", "cand-seed1")]
    expected = replicated_difference(ours, [errors[("solo", "last", "demo.dev")]])
    assert table.loc["cand", BASE_DIFF].tolist() == pytest.approx(list(expected))
    assert table.loc["cand", "baseline_run"] == "solo"
    assert df.set_index(["run", "artifact"]).loc[("solo", "last"), BASE_DIFF].tolist() == [0, 0, 0]


def test_replicas_that_cannot_be_paired_get_no_interval():
    train, evals, selections, errors = _replicated_runs()
    moved = [{**e, "eval_cuts_sha256": "f" * 64} if e["run"] == "cand-seed1" else e for e in evals]
    df = comparison_table(train, moved, selections, (), errors, replicas=REPLICAS)
    cand = replica_table(df, errors, REPLICAS, "base-seed0").set_index("run").loc["cand"]
    assert cand["wer_mean"] == pytest.approx(0.12)  # the figures are there ...
    assert pd.isna(cand["wer_mean_ci_low"]) and cand[BASE_DIFF].isna().all()  # ... no intervals


def test_the_tables_show_the_replicas_and_without_replicas_nothing_changes():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(train, evals, selections, (), errors, replicas=REPLICAS)
    table = replica_table(df, errors, REPLICAS, "base-seed0")
    text = report_markdown(df, table)
    low, high = (100 * table.iloc[0][k] for k in ("wer_mean_ci_low", "wer_mean_ci_high"))
    assert "## Seed replicas" in text
    assert (
        f"| base | demo.dev | 2 | 0, 1 | 22.00 [{low:.2f}, {high:.2f}] | 2.83 | 20.00 - 24.00 |"
        in (text)
    )
    assert "| cand-seed2 |" in text and "within the seed spread is not a finding" in text
    assert "<h2>Seed replicas</h2>" in report_html(df, table)
    plain = comparison_table(train, evals, selections, (), errors)
    empty = replica_table(plain, errors, {}, "solo")
    assert empty.empty and list(empty.columns) == list(SUMMARY_COLUMNS)
    assert "Seed replicas" not in report_markdown(plain, empty)
    assert plain["replica_of"].isna().all() and plain["seed"].isna().all()


def test_build_report_writes_the_replica_table(tmp_path):
    paths = []
    for run in ("base-seed0", "base-seed1"):
        path = tmp_path / run / "summary.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"run": run, "status": "failed", "error": "diverged"}))
        paths.append(path)
    out = {k: tmp_path / f"comparison.{k}" for k in ("csv", "md", "html")}
    build_report(
        train_summaries=paths, evaluations=[], selections=[], archive_dir=None,
        csv_path=out["csv"], md_path=out["md"], html_path=out["html"],
        replicas={k: v for k, v in REPLICAS.items() if k.startswith("base")},
        replicas_path=tmp_path / "replicas.csv",
    )  # fmt: skip
    assert pd.read_csv(tmp_path / "replicas.csv").columns.tolist() == list(SUMMARY_COLUMNS)
    assert pd.read_csv(out["csv"]).set_index("run").loc["base-seed1", "replica_of"] == "base"
