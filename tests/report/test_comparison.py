from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest

from asrflow.errors import AsrflowError
from asrflow.evaluate.archive import archive_eval_summary, archive_name, load_archive
from asrflow.evaluate.intervals import difference_interval
from asrflow.evaluate.paired import UtteranceErrors, read_utterance_errors
from asrflow.evaluate.scoring import score_utterance, write_utterances_csv
from asrflow.report.comparison import (
    COLUMNS,
    NONE,
    check_contracts,
    comparison_table,
    data_fingerprint,
)
from asrflow.report.slices import slice_table
from asrflow.report.stages import build_report
from asrflow.report.tables import report_markdown, write_report_tables
from asrflow.text import TextNormalization

CONTRACT = "c" * 64
OTHER_CONTRACT = "d" * 64
CUTS = "e" * 64


def sha(tag: str) -> str:
    return (tag * 64)[:64]


def train_summary(run: str, **over) -> dict:
    s = {
        "run": run,
        "status": "completed",
        "recipe": "config/recipes/demo_conformer.yaml",
        "update_budget": {"optimizer_steps": 2400, "peak_lr": 0.005, "warmup_steps": 120},
        "effective_batch_seconds": 20.0,
        "hashes": {
            "bpe_model": sha("b"),
            "tokens": sha("t"),
            "recipe": sha("r"),
            "normalization": CONTRACT,
            "dev_cuts": CUTS,
            "train_cuts": {"results/data/demo/filtered/train.jsonl.gz": sha("1")},
            "start_weights": None,
        },
        "init": None,
        "steps": 2400,
        "epochs": 14,
        "wall_seconds": 580.2,
        "num_parameters": 720581,
        "precision": "32-true",
        "devices": 1,
        "world_size": 1,
    }
    s.update(over)
    return s


def eval_summary(run: str, artifact: str, wer: float, **over) -> dict:
    s = {
        "schema": "asrflow.eval/1",
        "run": run,
        "artifact": artifact,
        "eval_set": "demo.dev",
        "artifact_sha256": hashlib.sha256(f"{run}/{artifact}".encode()).hexdigest(),
        "eval_cuts_sha256": CUTS,
        "contract": {"lowercase": True},
        "contract_sha256": CONTRACT,
        "num_utterances": 10,
        "ref_words": 100,
        "ref_chars": 500,
        "hits": 100 - round(wer * 100),
        "substitutions": round(wer * 100),
        "deletions": 0,
        "insertions": 0,
        "word_errors": round(wer * 100),
        "wer": wer,
        "char_substitutions": 5,
        "char_deletions": 0,
        "char_insertions": 0,
        "char_errors": 5,
        "cer": 0.01,
        "sentence_error_rate": 0.5,
        "slices": {"speaker": {"s1": {"wer": wer, "num_utterances": 5, "ref_words": 50}}},
        "dtype": "bfloat16",
        "dtypes": {},
        "decoding": {"mode": "greedy_ctc"},
        "audio_seconds": 30.0,
        "decode_seconds": 3.0,
        "rtf": 0.1,
        "device": "cpu",
        "evaluated_at": "2026-01-01T00:00:00+00:00",
    }
    s.update(over)
    return s


@pytest.fixture
def inputs():
    train = {
        "good": train_summary("good"),
        "broken": {
            "run": "broken",
            "status": "failed",
            "error": "CUDA out of memory. Tried to allocate 2 GiB\nTraceback (most recent call):",
            "recipe": "config/recipes/big.yaml",
            "update_budget": {"max_steps": 1000},
            "hashes": {"bpe_model": sha("b"), "train_cuts": {"x": sha("2")}},
        },
    }
    last = eval_summary("good", "last", 0.30)
    best = eval_summary("good", "valid.wer.best", 0.25)
    selections = {
        "good": {
            "run": "good",
            "eval_set": "demo.dev",
            "selected": "valid.wer.best",
            "reason": "lowest dev WER",
            "best_single": {"artifact": "valid.wer.best", "wer": 0.25, "cer": 0.01},
            "best_average": None,
            "candidates": {
                "last": {"wer": 0.30, "cer": 0.01, "artifact_sha256": last["artifact_sha256"]},
                "valid.wer.best": {
                    "wer": 0.25,
                    "cer": 0.01,
                    "artifact_sha256": best["artifact_sha256"],
                },
            },
            "contract_sha256": CONTRACT,
        }
    }
    duplicate = dict(best, evaluated_at="2025-12-01T00:00:00+00:00")
    older = eval_summary(
        "good",
        "valid.wer.best",
        0.40,
        artifact_sha256=sha("9"),
        evaluated_at="2025-11-01",
        run_hashes={"recipe": sha("old recipe"), "train_cuts": {"demo.train": sha("old data")}},
    )
    return train, [last, best], selections, [duplicate, older]


def test_one_row_per_run_artifact_eval_set(inputs):
    train, evals, selections, archived = inputs
    df = comparison_table(train, evals, selections, archived)
    assert list(df.columns) == list(COLUMNS)
    assert list(zip(df["run"], df["artifact"], df["current"], strict=True)) == [
        ("broken", NONE, True),
        ("good", "last", True),
        ("good", "valid.wer.best", True),
        ("good", "valid.wer.best", False),
    ]


def test_failed_run_has_one_row_with_its_error(inputs):
    df = comparison_table(*inputs)
    failed = df[df["run"] == "broken"]
    assert len(failed) == 1
    row = failed.iloc[0]
    assert row["status"] == "failed"
    assert (row["artifact"], row["eval_set"]) == (NONE, NONE)
    assert row["error"] == "CUDA out of memory. Tried to allocate 2 GiB"
    assert math.isnan(row["wer"]) and math.isnan(row["cer"])
    assert row["update_budget"] == "max_steps=1000"
    assert not row["selected"]


def test_long_error_is_truncated():
    train = {"x": {"run": "x", "status": "failed", "error": "boom " * 100}}
    df = comparison_table(train, [], {})
    assert len(df.loc[0, "error"]) == 200 and df.loc[0, "error"].endswith("...")


def test_selected_flag_and_rank(inputs):
    df = comparison_table(*inputs).set_index(["artifact", "current"])
    assert df.loc[("valid.wer.best", True), "selected"]
    assert not df.loc[("last", True), "selected"]
    # the archived row has the selected name but other bytes: not the selected model
    assert not df.loc[("valid.wer.best", False), "selected"]
    assert df.loc[("valid.wer.best", True), "rank"] == 1
    assert df.loc[("last", True), "rank"] == 2
    assert pd.isna(df.loc[("valid.wer.best", False), "rank"])  # archived rows are not ranked


def test_archived_duplicate_dropped_and_other_revision_kept(inputs):
    df = comparison_table(*inputs)
    archived = df[~df["current"]]
    assert len(archived) == 1
    row = archived.iloc[0]
    assert row["artifact_sha256"] == sha("9")
    assert row["wer"] == pytest.approx(0.40)
    # train columns describe the current revision, so archived rows do not carry them ...
    assert pd.isna(row["status"]) and pd.isna(row["steps"])
    # ... but what their own weights were trained from, as their package recorded it
    assert row["recipe_sha256"] == sha("old recipe") != train_summary("good")["hashes"]["recipe"]
    assert row["data_sha256"] == data_fingerprint({"demo.train": sha("old data")})
    assert pd.isna(row["tokenizer_sha256"])  # not in its record: not claimed


def test_an_archived_summary_without_run_hashes_claims_none(inputs):
    train, evals, selections, (_, older) = inputs
    del older["run_hashes"]  # written before evaluations carried them
    row = comparison_table(train, evals, selections, [older]).query("~current").iloc[0]
    assert row[["data_sha256", "tokenizer_sha256", "recipe_sha256"]].isna().all()


def test_train_columns(inputs):
    df = comparison_table(*inputs)
    row = df[(df["artifact"] == "last")].iloc[0]
    assert row["status"] == "completed"
    assert row["tokenizer_sha256"] == sha("b")
    assert row["recipe_sha256"] == sha("r")
    assert row["data_sha256"] == data_fingerprint({"elsewhere.jsonl.gz": sha("1")})
    assert row["update_budget"] == "optimizer_steps=2400"
    assert row["decoding"] == "greedy_ctc"
    assert (row["steps"], row["num_parameters"], row["substitutions"]) == (2400, 720581, 30)


def test_contract_mismatch_is_flagged_and_not_ranked_together(inputs):
    train, evals, selections, _ = inputs
    odd = eval_summary("good", "valid.loss.best", 0.10, contract_sha256=OTHER_CONTRACT)
    df = comparison_table(train, [*evals, odd], selections)
    notes = check_contracts(df)
    assert any("2 different contracts" in n for n in notes)
    assert any("demo.dev" in n and OTHER_CONTRACT[:12] in n for n in notes)
    ranks = df.set_index("artifact")["rank"]
    assert ranks["valid.loss.best"] == 1  # alone in its contract
    assert ranks["valid.wer.best"] == 1
    md = report_markdown(df)
    assert "Warning" in md and OTHER_CONTRACT[:12] in md
    assert check_contracts(comparison_table(*inputs)) == []


def test_written_tables(tmp_path, inputs):
    df = comparison_table(*inputs)
    csv, md, html = tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.html"
    write_report_tables(df, csv, md, html)
    back = pd.read_csv(csv)
    required = {"run", "artifact", "eval_set", "wer", "cer", "selected", "status", "error"}
    assert required | {"current", "contract_sha256", "data_sha256"} <= set(back.columns)
    assert len(back) == len(df)
    assert back["contract_sha256"].dropna().str.len().eq(64).all()  # full hashes
    assert back.loc[back["artifact"] == "valid.wer.best", "selected"].tolist() == [True, False]
    text = md.read_text()
    assert "CUDA out of memory. Tried to allocate 2 GiB" in text
    assert f"Scoring contract: `{CONTRACT}`" in text
    assert "| good | valid.wer.best | demo.dev | 25.00 |" in text
    assert "Earlier revisions" in text
    page = html.read_text()
    assert page.count('<tr class="selected">') == 1
    assert '<article class="card failed" id="run-broken"' in page
    assert "CUDA out of memory. Tried to allocate 2 GiB" in page


def test_archive_round_trip(tmp_path, inputs):
    summary = inputs[1][0]
    path = archive_eval_summary(summary, tmp_path / "archive")
    assert path.name == archive_name(summary)
    assert path.name == (
        f"{summary['artifact_sha256'][:16]}.demo.dev.{CUTS[:12]}.{CONTRACT[:12]}.json"
    )
    mtime = path.stat().st_mtime_ns
    assert archive_eval_summary(dict(summary), tmp_path / "archive") == path
    assert path.stat().st_mtime_ns == mtime
    assert load_archive(tmp_path / "archive") == [summary]
    assert load_archive(tmp_path / "nothing") == []
    with pytest.raises(AsrflowError, match="artifact_sha256"):
        archive_eval_summary({"run": "x", "artifact": "y"}, tmp_path / "archive")
    # the same model decoded another way (greedy, then with the word LM) keeps both results
    greedy = {**summary, "decoding_sha256": "a" * 64, "wer": 0.2}
    lexicon = {**summary, "decoding_sha256": "b" * 64, "wer": 0.1}
    paths = {archive_eval_summary(s, tmp_path / "two") for s in (greedy, lexicon)}
    assert sorted(p.name[-13:] for p in paths) == ["aaaaaaaa.json", "bbbbbbbb.json"]
    assert len(load_archive(tmp_path / "two")) == 2


def test_slice_table(inputs):
    table = slice_table(inputs[1], eval_set="demo.dev")
    assert len(table) == 2
    assert set(table["field"]) == {"speaker"}
    assert table["wer"].tolist() == [0.30, 0.25]


def test_rows_say_which_share_a_decode_and_which_code_changed_since():
    """Issue 11: identical weights are decoded once (each artifact keeps its rows, marked), and
    rows made by code that has changed since are marked, in the CSV and in the Markdown."""
    first = {"run": "r1", "artifact": "last", "eval_set": "demo.dev"}
    evals = [
        eval_summary("r1", "last", 0.2, decoded_by=first),
        eval_summary("r1", "valid.loss.best", 0.2, decoded_by=first),
        eval_summary("r1", "valid.loss.ave_3best", 0.18, code_changed=["asrflow.evaluate.decode"]),
    ]
    df = comparison_table({"r1": train_summary("r1")}, evals, {})
    by = dict(zip(df["artifact"], df["decoded_by"], strict=True))
    assert by["valid.loss.best"] == "r1/last"
    assert pd.isna(by["last"]) and pd.isna(by["valid.loss.ave_3best"])
    changed = dict(zip(df["artifact"], df["code_changed"], strict=True))
    assert changed["valid.loss.ave_3best"] == "asrflow.evaluate.decode"
    text = report_markdown(df)
    assert "same weights as r1/last: decoded once" in text
    assert "1 current row(s) were made by code that has changed since" in text


# --- intervals and differences against the selected artifact (issue 14) -------------------------

INTERVAL_COLUMNS = ["wer_ci_low", "wer_ci_high", "cer_ci_low", "cer_ci_high"]
DIFF = ["wer_diff_vs_selected", "wer_diff_vs_selected_ci_low", "wer_diff_vs_selected_ci_high"]


def _errors(word_errors, ref_words=None, ids=None) -> UtteranceErrors:
    n = len(word_errors)
    return UtteranceErrors(
        ids=np.array(ids or [f"u{i:03d}" for i in range(n)], dtype=object),
        word_errors=np.asarray(word_errors, dtype=np.int64),
        ref_words=np.asarray(ref_words if ref_words is not None else [10] * n, dtype=np.int64),
    )


def _with_intervals(summary: dict, low: float, high: float) -> dict:
    return {**summary, "wer_ci_low": low, "wer_ci_high": high, "cer_ci_low": 0.0,
            "cer_ci_high": 0.02}  # fmt: skip


def test_interval_columns_come_from_the_summaries_and_are_empty_without(inputs):
    train, (last, best), selections, archived = inputs
    evals = [_with_intervals(last, 0.21, 0.39), _with_intervals(best, 0.17, 0.33)]
    df = comparison_table(train, evals, selections, archived)
    assert list(df.columns[3:12]) == ["wer", "cer", *INTERVAL_COLUMNS, *DIFF]
    row = df[(df["artifact"] == "last") & df["current"]].iloc[0]
    assert (row["wer_ci_low"], row["wer_ci_high"], row["cer_ci_high"]) == (0.21, 0.39, 0.02)
    # the failed run and the archived summary (written before intervals existed) have none
    for other in (df[df["run"] == "broken"].iloc[0], df[~df["current"]].iloc[0]):
        assert other[INTERVAL_COLUMNS].isna().all() and other[DIFF].isna().all()


def test_each_artifact_against_the_selected_one_paired_by_utterance(inputs):
    train, evals, selections, archived = inputs
    rng = np.random.default_rng(0)
    best_errors = rng.integers(0, 4, size=60)
    last_errors = best_errors + rng.integers(0, 3, size=60)  # never better, often worse
    order = rng.permutation(60)  # utterances.csv rows in another order: paired by ID
    errors = {
        ("good", "valid.wer.best", "demo.dev"): _errors(best_errors),
        ("good", "last", "demo.dev"): _errors(last_errors[order], ids=[f"u{i:03d}" for i in order]),
    }
    df = comparison_table(train, evals, selections, archived, errors).set_index(
        ["artifact", "current"]
    )
    expected = difference_interval(last_errors, best_errors, [10] * 60)
    assert tuple(df.loc[("last", True), DIFF]) == pytest.approx(expected)
    assert df.loc[("last", True), "wer_diff_vs_selected_ci_low"] > 0  # a significant loss
    assert tuple(df.loc[("valid.wer.best", True), DIFF]) == (0.0, 0.0, 0.0)  # the selected
    assert df.loc[("valid.wer.best", False), DIFF].isna().all()  # archived: no utterances


def test_no_difference_across_contracts_cuts_or_other_utterances(inputs):
    train, (last, best), selections, _ = inputs
    errors = {
        ("good", "valid.wer.best", "demo.dev"): _errors([1, 2, 3]),
        ("good", "last", "demo.dev"): _errors([2, 2, 3]),
    }
    for changed in (
        {"contract_sha256": OTHER_CONTRACT},
        {"eval_cuts_sha256": sha("f")},
    ):
        df = comparison_table(train, [{**last, **changed}, best], selections, (), errors)
        assert df.loc[df["artifact"] == "last", DIFF].isna().all().all(), changed
    for other in (_errors([2, 2, 3], ids=["u000", "u001", "x"]), _errors([2, 2, 3], [9, 10, 10])):
        df = comparison_table(
            train, [last, best], selections, (), {**errors, ("good", "last", "demo.dev"): other}
        )
        assert df.loc[df["artifact"] == "last", DIFF].isna().all().all()
    df = comparison_table(train, [last, best], {}, (), errors)  # no selection, no reference
    assert df[DIFF].isna().all().all()


def test_utterance_errors_are_read_by_id(tmp_path):
    contract = TextNormalization()
    scores = [
        score_utterance("NA", "a b c", "a b", contract),
        score_utterance("007", "x y", "x z w", contract),
    ]
    write_utterances_csv(scores, tmp_path / "utterances.csv")
    got = read_utterance_errors(tmp_path / "utterances.csv")
    assert list(got.ids) == ["007", "NA"]  # sorted; IDs stay text ("NA" is not missing)
    assert list(got.word_errors) == [2, 1] and list(got.ref_words) == [2, 3]
    write_utterances_csv([scores[0], scores[0]], tmp_path / "twice.csv")
    with pytest.raises(AsrflowError, match="'NA' is listed more than once"):
        read_utterance_errors(tmp_path / "twice.csv")


def test_report_pairs_each_summary_with_its_utterances_csv(tmp_path, inputs):
    train, (last, best), selections, _ = inputs
    contract = TextNormalization()
    refs = [f"w{i} x{i} y{i}" for i in range(40)]
    hyps = {"last": [r if i % 3 else "w" for i, r in enumerate(refs)], "valid.wer.best": refs}
    paths = {}
    for summary in (last, best):
        directory = tmp_path / "eval" / summary["artifact"] / "demo.dev"
        directory.mkdir(parents=True)
        scores = [
            score_utterance(f"u{i}", r, h, contract)
            for i, (r, h) in enumerate(zip(refs, hyps[summary["artifact"]], strict=True))
        ]
        write_utterances_csv(scores, directory / "utterances.csv")
        wer, low, high = (42 / 120, 0.25, 0.45) if summary is last else (0.0, 0.0, 0.0)
        figures = {**_with_intervals(summary, low, high), "wer": wer}
        (directory / "summary.json").write_text(json.dumps(figures))
        paths[summary["artifact"]] = directory
    (tmp_path / "train.json").write_text(json.dumps(train["good"]))
    (tmp_path / "selected.json").write_text(json.dumps(selections["good"]))
    out = {k: tmp_path / f"comparison.{k}" for k in ("csv", "md", "html")}
    build_report(
        train_summaries=[tmp_path / "train.json"],
        evaluations=[paths[a] / "summary.json" for a in ("last", "valid.wer.best")],
        utterances=[paths[a] / "utterances.csv" for a in ("valid.wer.best", "last")],
        selections=[tmp_path / "selected.json"],
        archive_dir=None,
        csv_path=out["csv"],
        md_path=out["md"],
        html_path=out["html"],
    )
    table = pd.read_csv(out["csv"]).set_index("artifact")
    # last gets every third utterance wrong: "w" for "wN xN yN", 14 x 3 errors in 120 words
    assert table.loc["last", "wer_diff_vs_selected"] == pytest.approx(42 / 120)
    assert 0 < table.loc["last", "wer_diff_vs_selected_ci_low"] < 42 / 120
    assert table.loc["valid.wer.best", DIFF].tolist() == [0.0, 0.0, 0.0]
    assert table.loc["last", "wer_ci_low"] == 0.25
    text = out["md"].read_text()
    assert "| good | last | demo.dev | 35.00 [25.00, 45.00] | 1.00 [0.00, 2.00] | +35.00 [+" in text
    assert "| +0.00 [+0.00, +0.00] |" in text and "paired interval" in text
    assert "+35.00 [+" in out["html"].read_text()


# --- runs against the baseline run (issue 14, sections 1 and 4) ----------------------------------

BASE_DIFF = ["wer_diff_vs_baseline", "wer_diff_vs_baseline_ci_low", "wer_diff_vs_baseline_ci_high"]


def _runs_against_a_baseline():
    """Three runs selecting ``last`` on demo.dev: ``same`` makes the baseline's errors, utterance
    for utterance; ``better`` half of them; ``broken`` failed. ``same`` differs from the
    baseline in one recipe key, ``better`` in a recipe key and the tokenizer."""
    settings = {"optim": {"lr": 0.002}, "trainer": {"max_steps": 2400}}
    train = {
        "base": train_summary("base", recipe_settings=settings),
        "same": train_summary("same", recipe_settings={**settings, "optim": {"lr": 0.0015}}),
        "better": train_summary(
            "better",
            recipe_settings={**settings, "trainer": {"max_steps": 4800}},
            hashes={**train_summary("x")["hashes"], "bpe_model": sha("z")},
        ),
        "broken": {
            "run": "broken",
            "status": "failed",
            "error": "diverged",
            "recipe_settings": {**settings, "optim": {"lr": 0.05}},
        },
    }
    evals, selections, errors = [], {}, {}
    rng = np.random.default_rng(1)
    base_errors = rng.integers(1, 5, size=80)
    for run, errs in (("base", base_errors), ("same", base_errors), ("better", base_errors // 2)):
        for artifact in ("last", "valid.loss.best"):
            evals.append(eval_summary(run, artifact, errs.sum() / 800))
            errors[(run, artifact, "demo.dev")] = _errors(errs)
        selections[run] = {"run": run, "selected": "last"}
    return train, evals, selections, errors


def test_each_run_against_the_baseline_run():
    train, evals, selections, errors = _runs_against_a_baseline()
    df = comparison_table(train, evals, selections, (), errors)
    rows = df.set_index(["run", "artifact"])
    assert set(df["baseline_run"]) == {"base"}  # no baseline_run given: the first run
    # the baseline's own selected row: 0 [0, 0]; no change named
    assert rows.loc[("base", "last"), BASE_DIFF].tolist() == [0.0, 0.0, 0.0]
    assert pd.isna(rows.loc[("base", "last"), "changed_vs_baseline"])
    assert not rows.loc[("base", "last"), "confounded"]
    # identical errors: a difference of 0 whose interval contains 0; one recipe key changed
    diff, low, high = rows.loc[("same", "last"), BASE_DIFF]
    assert diff == 0.0 and low <= 0.0 <= high
    assert rows.loc[("same", "last"), "changed_vs_baseline"] == "recipe: optim.lr 0.002 -> 0.0015"
    assert not rows.loc[("same", "last"), "confounded"]
    # clearly better: the whole interval below 0; a recipe key and the tokenizer: confounded
    diff, low, high = rows.loc[("better", "last"), BASE_DIFF]
    assert diff < 0 and high < 0
    assert rows.loc[("better", "last"), "changed_vs_baseline"] == (
        "tokenizer: bbbbbbbb -> zzzzzzzz; recipe: trainer.max_steps 2400 -> 4800"
    )
    assert rows.loc[("better", "last"), "confounded"]
    # only selected artifacts are compared across runs; every row of a run names its change
    assert rows.loc[("better", "valid.loss.best"), BASE_DIFF].isna().all()
    assert rows.loc[("better", "valid.loss.best"), "confounded"]
    # a failed run has no figures, but what made it differ is there
    broken = rows.loc[("broken", NONE)]
    assert broken[BASE_DIFF].isna().all()
    assert broken["changed_vs_baseline"] == "recipe: optim.lr 0.002 -> 0.05"
    text = report_markdown(df)
    assert "[confounded] tokenizer: bbbbbbbb -> zzzzzzzz; recipe:" in text
    assert "| (baseline run) |" in text
    better = f"{100 * diff:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]"
    assert f"| {better} | [confounded] tokenizer" in text
    assert "- **broken**: diverged (vs baseline base: recipe: optim.lr 0.002 -> 0.05)" in text


PARENT_DIFF = ["wer_diff_vs_parent", "wer_diff_vs_parent_ci_low", "wer_diff_vs_parent_ci_high"]


def test_a_fine_tuning_run_against_the_run_it_started_from():
    """Issue 32: a child run (``init: {run: base}``) gets its selected artifact against its
    parent's, paired; no other run does, and without a child the columns stay out of view."""
    from asrflow.report.page import report_html

    train, evals, selections, errors = _runs_against_a_baseline()
    plain = comparison_table(train, evals, selections, (), errors)
    assert plain["parent_run"].isna().all() and plain[PARENT_DIFF].isna().all().all()
    assert "WER diff vs parent" not in report_markdown(plain)
    assert "vs parent" not in report_html(plain)

    train["better"] = {**train["better"], "init": {"run": "base", "model": "results/x"}}
    df = comparison_table(train, evals, selections, (), errors, baseline_run="same")
    rows = df.set_index(["run", "artifact"])
    assert (rows.loc[("better", "last"), "parent_run"]) == "base"
    assert rows.loc[("better", "valid.loss.best"), "parent_run"] == "base"  # every row of it
    diff, low, high = rows.loc[("better", "last"), PARENT_DIFF]
    assert diff < 0 and high < 0  # half the parent's errors
    assert diff == pytest.approx(
        rows.loc[("better", "last"), "wer"] - rows.loc[("base", "last"), "wer"]
    )
    assert rows.loc[("better", "valid.loss.best"), PARENT_DIFF].isna().all()  # selected rows only
    for run in ("base", "same"):
        assert pd.isna(rows.loc[(run, "last"), "parent_run"])
        assert rows.loc[(run, "last"), PARENT_DIFF].isna().all()
    text = report_markdown(df)
    assert "| WER diff vs parent | parent |" in text
    assert f"| {100 * diff:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}] | base |" in text
    assert "WER diff vs parent: a fine-tuning run's selected artifact" in text
    html = report_html(df)
    assert "<th>vs parent base</th>" in html and f"{100 * diff:+.2f}" in html


def test_baseline_run_named_and_checked():
    train, evals, selections, errors = _runs_against_a_baseline()
    df = comparison_table(train, evals, selections, (), errors, baseline_run="better")
    rows = df.set_index(["run", "artifact"])
    assert set(df["baseline_run"]) == {"better"}
    assert rows.loc[("base", "last"), "wer_diff_vs_baseline_ci_low"] > 0  # worse than it
    assert rows.loc[("better", "last"), BASE_DIFF].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(AsrflowError, match=r"report\.baseline_run: .*'nope'"):
        comparison_table(train, evals, selections, (), errors, baseline_run="nope")


def test_no_difference_to_the_baseline_across_contracts_or_cuts():
    train, evals, selections, errors = _runs_against_a_baseline()
    for changed in ({"contract_sha256": OTHER_CONTRACT}, {"eval_cuts_sha256": sha("f")}):
        moved = [{**e, **changed} if e["run"] == "better" else e for e in evals]
        df = comparison_table(train, moved, selections, (), errors)
        row = df[(df["run"] == "better") & (df["artifact"] == "last")].iloc[0]
        assert row[BASE_DIFF].isna().all(), changed
        assert row["changed_vs_baseline"].startswith("tokenizer")  # the change is still named


def test_one_run_shows_no_baseline_columns_and_archived_rows_have_none(inputs):
    df = comparison_table(*inputs)
    archived = df[~df["current"]].iloc[0]
    assert pd.isna(archived["baseline_run"]) and pd.isna(archived["confounded"])
    only = comparison_table({"good": inputs[0]["good"]}, *inputs[1:])
    text = report_markdown(only)
    assert "changed vs baseline" not in text and "WER diff vs baseline" not in text


def test_report_reads_the_train_records_and_the_baseline_run(tmp_path):
    summaries = []
    for run, torch_version in (("a", "2.5.1"), ("b", "2.6.0")):
        path = tmp_path / run / "summary.json"
        path.parent.mkdir()
        path.write_text(json.dumps(train_summary(run)))
        record = {
            "schema": "asrflow.provenance/1", "record_sha256": "x", "directories": [],
            "inputs": {}, "outputs": {}, "extra_inputs": {},
            "packages": {"python": "3.12.3", "torch": torch_version},
        }  # fmt: skip
        (tmp_path / run / "summary.json.prov.json").write_text(json.dumps(record))
        summaries.append(path)
    out = {k: tmp_path / f"comparison.{k}" for k in ("csv", "md", "html")}
    build_report(
        train_summaries=summaries, evaluations=[], selections=[], archive_dir=None,
        csv_path=out["csv"], md_path=out["md"], html_path=out["html"], baseline_run="b",
    )  # fmt: skip
    table = pd.read_csv(out["csv"]).set_index("run")
    assert table.loc["a", "changed_vs_baseline"] == "packages: torch 2.6.0 -> 2.5.1"
    assert table.loc["a", "baseline_run"] == "b" and not table.loc["a", "confounded"]
    assert "(vs baseline b: packages: torch 2.6.0 -> 2.5.1)" in out["md"].read_text()


def test_an_empty_difference_cell_says_why(inputs):
    train, (last, best), selections, _ = inputs
    errors = {
        ("good", "valid.wer.best", "demo.dev"): _errors([1, 2, 3]),
        ("good", "last", "demo.dev"): _errors([2, 2, 3]),
    }
    partial = {"eval_cuts_sha256": sha("f"), "utterances_total": 12, "utterances_scored": 10,
               "utterances_excluded": 2, "excluded_by_reason": {"too_long": 2},
               "seconds_total": 400.0, "seconds_excluded": 300.0}  # fmt: skip
    cases = {
        "another scoring contract": {"contract_sha256": OTHER_CONTRACT},
        "scored on other utterances (evaluation.filter excluded some of good/last)": partial,
    }
    for why, changed in cases.items():
        df = comparison_table(train, [{**last, **changed}, best], selections, (), errors)
        row = df[df["artifact"] == "last"].iloc[0]
        assert row["not_compared"] == f"not compared with valid.wer.best (selected): {why}"
        assert pd.isna(df[df["artifact"] == "valid.wer.best"].iloc[0]["not_compared"])
    other = {**errors, ("good", "last", "demo.dev"): _errors([2, 2, 3], ids=["u000", "u1", "x"])}
    df = comparison_table(train, [last, best], selections, (), other)
    assert (
        df[df["artifact"] == "last"]
        .iloc[0]["not_compared"]
        .endswith("utterances or references differ")
    )
    df = comparison_table(train, [last, best], selections, (), errors)  # compared: no note
    assert df["not_compared"].isna().all()


def test_a_partial_eval_set_is_counted_and_marked_in_the_tables(inputs):
    train, (last, best), selections, _ = inputs
    whole = {"utterances_total": 12, "utterances_scored": 12, "utterances_excluded": 0,
             "excluded_by_reason": {}, "seconds_total": 314.0, "seconds_excluded": 0.0}  # fmt: skip
    partial = {**whole, "eval_cuts_sha256": sha("f"), "utterances_scored": 4,
               "utterances_excluded": 8, "excluded_by_reason": {"too_long": 8},
               "seconds_excluded": 303.5}  # fmt: skip
    df = comparison_table(train, [{**last, **partial}, {**best, **whole}], selections, ())
    row = df[df["artifact"] == "last"].iloc[0]
    assert (row["utterances_scored"], row["utterances_excluded"]) == (4, 8)
    assert row["excluded_by_reason"] == "8 too_long"
    # never ranked with the whole set: each is first among its own utterances
    assert set(df.loc[df["eval_set"] == "demo.dev", "rank"].dropna()) == {1}
    markdown = report_markdown(df)
    assert "| 4/12 (excluded: 8 too_long, 303.5 s) |" in markdown
    assert "| 12/12 |" in markdown
    assert "30.00 (partial)" in markdown and "25.00 (partial)" not in markdown
    assert "2 different sets of utterances" in markdown


def test_an_auto_runs_derived_values_and_their_reasons_reach_the_report(inputs, tmp_path):
    train, (last, _), selections, _ = inputs
    plan = {
        "rules_version": 1,
        "stats": {"hours": 0.26},
        "choices": [
            {"key": "frontend_conf.fs", "value": 8000, "reason": "every utterance is at 8 kHz",
             "overridden_by": None},
            {"key": "trainer.max_steps", "value": 14000, "reason": "100 passes x 0.26 h",
             "overridden_by": "trainer.max_steps"},
        ],
    }  # fmt: skip
    (tmp_path / "train.json").write_text(json.dumps({**train["good"], "plan": plan}))
    (tmp_path / "selected.json").write_text(json.dumps(selections["good"]))
    (tmp_path / "summary.json").write_text(json.dumps(last))
    out = {k: tmp_path / f"comparison.{k}" for k in ("csv", "md", "html")}
    build_report(
        train_summaries=[tmp_path / "train.json"],
        evaluations=[tmp_path / "summary.json"],
        selections=[tmp_path / "selected.json"],
        archive_dir=None,
        csv_path=out["csv"],
        md_path=out["md"],
        html_path=out["html"],
    )
    assert pd.read_csv(out["csv"])["plan"].tolist() == ["frontend_conf.fs=8000"]
    text = out["md"].read_text()
    assert "## Derived recipes (recipe: auto)" in text
    assert "- `frontend_conf.fs` = 8000: every utterance is at 8 kHz" in text
    assert "`trainer.max_steps`: overridden (`runs.good.overrides.trainer.max_steps`)" in text
    assert "<summary>good</summary>" in out["html"].read_text()


DEV_NOTE = (
    "demo.dev measures seen speakers only: all 3 of its speakers are also in demo.train, while "
    "demo.test has 12 speakers train does not have (of 12)"
)


def test_a_run_chosen_on_a_dev_of_seen_speakers_only_is_noted_beside_its_selection(
    tmp_path, inputs
):
    """Issue 31, item 2: the selection's finding in the CSV column, and one note line."""
    train, evals, selections, archived = inputs
    selections["good"]["dev_measures"] = "seen speakers only"
    selections["good"]["dev_groups"] = {"measures": "seen speakers only", "message": DEV_NOTE}
    df = comparison_table(train, evals, selections, archived)
    csv, md, html = tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.html"
    write_report_tables(df, csv, md, html)
    back = pd.read_csv(csv)
    good = back[(back["run"] == "good") & back["current"]]
    assert good["dev_measures"].tolist() == ["seen speakers only"] * 2
    assert good["dev_note"].tolist() == [DEV_NOTE] * 2
    assert back.loc[back["run"] == "broken", "dev_measures"].isna().all()
    assert back.loc[~back["current"], "dev_measures"].isna().all()  # another revision
    text = md.read_text()
    assert text.count(f"> Run good: {DEV_NOTE}.") == 1
    assert text.count("chosen on a dev set of seen speakers only") == 1  # the selected row
    page = html.read_text()
    assert page.count(f'<p class="warning">Run good: {DEV_NOTE}.</p>') == 1
    # a selection without the finding (or written before it existed) notes nothing
    del selections["good"]["dev_measures"], selections["good"]["dev_groups"]
    write_report_tables(comparison_table(train, evals, selections, archived), csv, md, html)
    assert "seen speakers only" not in md.read_text() + html.read_text()
    assert pd.read_csv(csv)["dev_measures"].isna().all()
