from __future__ import annotations

import hashlib
import math

import pandas as pd
import pytest

from asrflow.errors import AsrflowError
from asrflow.evaluate.archive import archive_eval_summary, archive_name, load_archive
from asrflow.report.comparison import (
    COLUMNS,
    NONE,
    check_contracts,
    comparison_table,
    data_fingerprint,
    slice_table,
)
from asrflow.report.tables import report_markdown, write_report_tables

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
        "good", "valid.wer.best", 0.40, artifact_sha256=sha("9"), evaluated_at="2025-11-01"
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
    # train columns describe the current revision, so archived rows do not carry them
    assert pd.isna(row["status"]) and pd.isna(row["data_sha256"])


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
    assert '<tr class="failed">' in page


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
