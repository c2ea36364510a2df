"""The HTML page's pieces (issue 33, item 4): summary cards, the selection gate's decision,
figures inlined as data URIs, results grouped by eval set, settings and hashes once per run, and
every text from the data escaped."""

from __future__ import annotations

import base64
import hashlib
import re

import pandas as pd
import pytest

from asrflow.errors import AsrflowError
from asrflow.report.cards import (
    BETTER,
    KEPT,
    NO_AVERAGE,
    NOT_KEPT,
    UNCLEAR,
    WORSE,
    gate_of,
    run_cards,
    verdict,
)
from asrflow.report.comparison import comparison_table
from asrflow.report.figures import (
    AUDIT,
    DIFFERENCES,
    LEARNING_CURVES,
    PNG_MAGIC,
    SLICES,
    PageFigure,
    figure_kind,
    figures_from_files,
    read_figure,
)
from asrflow.report.page import eval_set_tables, report_html
from asrflow.report.plots import plot_wer_differences
from asrflow.report.replicas import replica_table
from tests.report.demo_report import build_demo
from tests.report.test_comparison import _runs_against_a_baseline, eval_summary, train_summary
from tests.report.test_replicas import REPLICAS, _replicated_runs

PNG = PNG_MAGIC + b"\x00" * 16


def _selection(run: str, selected: str, average: str | None = None, **over) -> dict:
    s = {
        "run": run,
        "eval_set": "demo.dev",
        "selected": selected,
        "reason": f"{selected} has the lowest dev WER",
        "best_single": {"artifact": "last", "wer": 0.2},
        "best_average": {"artifact": average, "wer": 0.19} if average else None,
        "significance": None,
    }
    return {**s, **over}


def _significance(diff: float, low: float, high: float) -> dict:
    return {"artifact": "ave", "against": "last", "wer_diff": diff, "ci_low": low,
            "ci_high": high, "level": 0.95, "significant": high < 0 or low > 0}  # fmt: skip


# --- the selection gate and the verdict against the baseline ------------------------------------


def test_the_gate_says_whether_the_average_was_kept_and_how_sure_that_is():
    assert gate_of(None) is None and gate_of({"run": "r"}) is None
    plain = gate_of(_selection("r", "last"))
    assert (plain.decision, plain.significance, plain.significant) == (NO_AVERAGE, "", None)
    kept = gate_of(_selection("r", "ave", "ave", significance=_significance(-0.05, -0.08, -0.02)))
    assert (kept.decision, kept.significant) == (KEPT, True)
    assert kept.significance == (
        "ave - last on demo.dev: -5.00 [-8.00, -2.00] points (95 % interval), significant"
    )
    lost = gate_of(
        _selection(
            "r", "last", "ave", significance=_significance(-0.01, -0.03, 0.01),
            require_significant=True,
        )
    )  # fmt: skip
    assert (lost.decision, lost.significant, lost.required) == (NOT_KEPT, False, True)
    assert lost.significance.endswith("not significant")
    unmeasured = gate_of(_selection("r", "last", "ave"))  # written without utterances
    assert (unmeasured.decision, unmeasured.significant) == (NOT_KEPT, None)


def test_a_difference_to_the_baseline_is_a_finding_only_outside_its_interval():
    assert verdict(-0.05, -0.08, -0.02) == BETTER
    assert verdict(0.05, 0.02, 0.08) == WORSE
    assert verdict(-0.01, -0.03, 0.01) == UNCLEAR
    assert verdict(0.0, 0.0, 0.0) == UNCLEAR  # the same errors (the card says "the baseline")
    assert verdict(float("nan"), float("nan"), float("nan")) == ""


# --- cards ---------------------------------------------------------------------------------------


def test_a_card_per_run_baseline_first_failed_last():
    train, evals, selections, errors = _runs_against_a_baseline()
    df = comparison_table(train, evals, selections, (), errors)
    cards = {c.name: c for c in run_cards(df, selections)}
    assert list(cards) == ["base", "better", "same", "broken"]
    base, better, broken = cards["base"], cards["better"], cards["broken"]
    assert base.baseline and not better.baseline
    assert (better.selected, [r.eval_set for r in better.results]) == ("last", ["demo.dev"])
    row = df[(df["run"] == "better") & df["selected"]].iloc[0]
    assert better.results[0].verdict == BETTER
    assert better.results[0].wer == f"{100 * row['wer']:.2f}"  # no interval in the summary
    assert better.results[0].vs_baseline.startswith("-")
    assert better.confounded and better.change.startswith("tokenizer: bbbbbbbb -> zzzzzzzz")
    assert cards["same"].results[0].verdict == UNCLEAR
    assert (broken.failed, broken.error, broken.results) == (True, "diverged", ())
    assert broken.change == "recipe: optim.lr 0.002 -> 0.05"  # why it differs, even failed


def test_a_replicated_run_gets_one_card_with_a_line_per_seed():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(
        train, evals, selections, (), errors, baseline_run="base-seed0", replicas=REPLICAS
    )
    table = replica_table(df, errors, REPLICAS, "base-seed0")
    cards = {c.name: c for c in run_cards(df, selections, table)}
    assert list(cards) == ["base", "cand", "solo"]  # the replicated baseline first
    cand = cards["cand"]
    assert cand.status == "partly failed" and cand.selected == "last x2"
    assert [(s.run, s.seed, s.status) for s in cand.seeds] == [
        ("cand-seed0", "0", "completed"),
        ("cand-seed1", "1", "completed"),
        ("cand-seed2", "2", "failed"),
    ]
    assert cand.seeds[2].error == "diverged"
    assert [s.wers for s in cand.seeds[:2]] == [(("demo.dev", "10.00"),), (("demo.dev", "14.00"),)]
    (result,) = cand.results
    assert result.wer.startswith("12.00 [") and result.note == "sd 2.83, range 10.00 - 14.00"
    assert result.verdict in (BETTER, UNCLEAR)
    assert cand.notes == ("replicas without a result: cand-seed2",)
    assert [title for title, _ in cand.details] == ["cand-seed0", "cand-seed1", "cand-seed2"]
    assert cards["base"].baseline and len(cards["base"].seeds) == 2


def test_a_wer_on_part_of_its_eval_set_says_so_on_the_card():
    partial = {"utterances_total": 12, "utterances_scored": 4, "utterances_excluded": 8,
               "excluded_by_reason": {"too_long": 8}, "seconds_excluded": 303.5}  # fmt: skip
    evals = [eval_summary("r1", "last", 0.3, **partial)]
    df = comparison_table({"r1": train_summary("r1")}, evals, {"r1": _selection("r1", "last")})
    (card,) = run_cards(df, {"r1": _selection("r1", "last")})
    assert card.results[0].note == "partial: 4/12 (excluded: 8 too_long, 303.5 s)"


# --- the page ------------------------------------------------------------------------------------


@pytest.fixture
def two_sets():
    """One run evaluated on a dev and a test set, decoded with a beam on test."""
    evals = [
        eval_summary("r1", a, w, eval_set=s, decoding=d)
        for s, d in (("demo.dev", {"mode": "greedy_ctc"}), ("demo.test", {"mode": "beam"}))
        for a, w in (("last", 0.3), ("valid.wer.best", 0.2))
    ]
    selections = {"r1": _selection("r1", "valid.wer.best")}
    for e in evals:
        selections["r1"].setdefault("candidates", {})[e["artifact"]] = {
            "artifact_sha256": e["artifact_sha256"]
        }
    return comparison_table({"r1": train_summary("r1")}, evals, selections), selections


def test_results_are_grouped_by_eval_set_dev_first_and_sort_by_their_values(two_sets):
    df, selections = two_sets
    tables = eval_set_tables(df, selections)
    assert re.findall(r'data-eval-set="([^"]+)"', tables) == ["demo.dev", "demo.test"]
    assert "dev set: the runs select on it" in tables and "test set" in tables
    assert tables.count('<tr class="selected">') == 2  # one per eval set
    assert '<td data-sort="0.2">20.00</td>' in tables  # sorted by the rate, shown in percent
    for column in ("decoding", "artifact sha", "data sha", "budget", "status"):
        assert f"<th>{column}</th>" not in tables  # in the cards, once per run
    assert "<th>WER diff vs baseline</th>" not in tables  # one run: nothing to compare


def test_settings_and_hashes_are_shown_once_per_run(two_sets):
    df, selections = two_sets
    page = report_html(df, selections=selections)
    (settings,) = re.findall(r'<details class="settings">.*?</details>', page, re.S)
    assert "<dt>decoding</dt><dd>greedy_ctc (demo.dev); beam (demo.test)</dd>" in settings
    shas = "; ".join(
        f"{hashlib.sha256(f'r1/{a}'.encode()).hexdigest()[:12]} ({a})"
        for a in ("last", "valid.wer.best")
    )
    assert f'<dt>artifact sha256</dt><dd class="hash">{shas}</dd>' in settings
    assert '<dt>recipe sha256</dt><dd class="hash">rrrrrrrrrrrr</dd>' in settings
    assert "<dt>update budget</dt><dd>optimizer_steps=2400</dd>" in settings
    assert page.count("rrrrrrrrrrrr") == 1


def test_text_from_the_data_is_escaped():
    """Run names, errors (which quote transcripts and paths) and changes are user text."""
    evil = '<img src=x onerror="alert(1)">'
    script = "</td><script>alert('x')</script> ref: \"a & b\""
    train = {
        evil: train_summary(evil),
        "bad": {"run": "bad", "status": "failed", "error": script},
    }
    evals = [eval_summary(evil, "<last>", 0.3)]
    selections = {evil: _selection(evil, "<last>", reason=script)}
    page = report_html(comparison_table(train, evals, selections), selections=selections)
    body = page.split("<body>", 1)[1].split("<script>", 1)[0]  # the page's own script aside
    assert evil not in page and "<script>alert" not in page and "<last>" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body
    assert "&lt;/td&gt;&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in body
    assert "&quot;a &amp; b&quot;" in body
    assert re.search(r'id="run-img-src-x-onerror-alert-1"', body)  # a safe anchor


def test_the_page_shows_failed_runs_replicas_and_the_archive_without_figures():
    train, evals, selections, errors = _replicated_runs()
    df = comparison_table(train, evals, selections, (), errors, replicas=REPLICAS)
    page = report_html(df, replica_table(df, errors, REPLICAS, "base-seed0"))
    assert "<h2>Seed replicas</h2>" in page and 'id="figures"' not in page
    assert re.findall(r'<article class="([^"]+)" id="run-cand"', page) == ["card"]
    assert '<tr class="seed" data-run="cand-seed2"><td>2</td><td colspan="2">' in page
    assert '<span class="error">diverged</span>' in page


# --- figures -------------------------------------------------------------------------------------


def test_figures_are_known_by_their_paths_and_inlined_as_data_uris(tmp_path):
    assert figure_kind("results/report/plots/r1/learning_curves.png") == (
        LEARNING_CURVES, "r1", None,
    )  # fmt: skip
    assert figure_kind("results/report/plots/r1/demo.dev.slices.png") == (SLICES, "r1", "demo.dev")
    assert figure_kind("results/runs/r1/audit/batches.png") == (AUDIT, "r1", None)
    with pytest.raises(AsrflowError, match="not a figure"):
        figure_kind("results/report/plots/differences.png")
    paths = []
    for name in ("r2/learning_curves.png", "r1/demo.test.slices.png", "r1/learning_curves.png"):
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(PNG)
        paths.append(path)
    figures = figures_from_files(paths)
    assert [(f.run, f.kind) for f in figures] == [
        ("r1", LEARNING_CURVES), ("r1", SLICES), ("r2", LEARNING_CURVES),
    ]  # fmt: skip
    prefix, _, data = figures[0].data_uri().partition(",")
    assert prefix == "data:image/png;base64" and base64.b64decode(data) == PNG
    assert figures[1].title == "WER per slice: demo.test"
    (tmp_path / "r3").mkdir()
    (tmp_path / "r3" / "learning_curves.png").write_text("not a png")
    with pytest.raises(AsrflowError, match="not a PNG"):
        read_figure(tmp_path / "r3" / "learning_curves.png")
    page = report_html(comparison_table({}, [], {}), figures=[PageFigure(DIFFERENCES, PNG)])
    assert f'src="{PageFigure(DIFFERENCES, PNG).data_uri()}"' in page


def test_the_inline_forest_plot_is_the_figure_of_rule_plot_differences(tmp_path):
    """``snakemake --report`` shows results/report/plots/differences.png, drawn from the CSV;
    the page draws it from the same table in memory: the same PNG, byte for byte."""
    html = build_demo(tmp_path)
    plot_wer_differences(html.parent / "comparison.csv", tmp_path / "differences.png")
    inline = re.search(r'data-kind="differences"><img src="data:image/png;base64,([^"]+)"',
                       html.read_text())  # fmt: skip
    assert (
        inline and base64.b64decode(inline.group(1)) == (tmp_path / "differences.png").read_bytes()
    )
    assert len(pd.read_csv(html.parent / "comparison.csv")) == 27  # every row, as before


def test_a_fine_tuning_runs_card_counts_its_trainable_parameters() -> None:
    import pandas as pd

    from asrflow.report.cards import _parameters

    assert _parameters(pd.Series({"num_parameters": 1234567, "trainable_parameters": 1234567})) == (
        "1,234,567"
    )
    frozen = pd.Series({"num_parameters": 1234567, "trainable_parameters": 12345})
    assert _parameters(frozen) == "1,234,567 (12,345 trainable)"
    assert _parameters(pd.Series({"num_parameters": None, "trainable_parameters": None})) == ""
    lora = pd.Series(
        {"num_parameters": 1234567, "trainable_parameters": 12345, "adapter_bytes": 52100}
    )
    assert _parameters(lora) == "1,234,567 (12,345 trainable; adapter 52.1 kB)"
