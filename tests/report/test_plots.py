from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from asrflow.errors import AsrflowError
from asrflow.report.plots import (
    NO_DIFFERENCE,
    plot_learning_curves,
    plot_slice_wer,
    plot_wer_differences,
    slice_intervals,
)
from asrflow.report.slices import slice_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


def write_metrics(path: Path, with_valid: bool = True) -> Path:
    """A CSVLogger-shaped metrics.csv: lr rows, train rows and (optionally) valid rows."""
    header = ["epoch", "lr", "step", "train/grad_norm", "train/loss_per_token"]
    if with_valid:
        header += ["valid/cer", "valid/loss", "valid/wer"]
    lines = [",".join(header)]
    for step in range(20):
        lr = f",{0.001 * min(1, (step + 1) / 5)},{step},,"
        train = f"0,,{step},{5.0 / (step + 1)},{3.0 - 0.1 * step}"
        lines += [lr + (",,," if with_valid else ""), train + (",,," if with_valid else "")]
        if with_valid and step % 5 == 4:
            lines.append(f"0,,{step},,,{0.5 - 0.02 * step},{2.5 - 0.1 * step},{0.8 - 0.03 * step}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_learning_curves_from_synthetic_metrics(tmp_path):
    out = tmp_path / "plots" / "curves.png"
    plot_learning_curves(write_metrics(tmp_path / "metrics.csv"), out)
    assert is_png(out)
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temporaries left


def test_learning_curves_without_validation_columns(tmp_path):
    out = tmp_path / "curves.png"
    plot_learning_curves(write_metrics(tmp_path / "metrics.csv", with_valid=False), out)
    assert is_png(out)


def test_learning_curves_rejects_other_csv(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(AsrflowError, match="step"):
        plot_learning_curves(tmp_path / "x.csv", tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()


def summary(artifact: str, eval_set: str = "demo.dev", contract: str = "c" * 64) -> dict:
    return {
        "run": "r",
        "artifact": artifact,
        "eval_set": eval_set,
        "contract_sha256": contract,
        "slices": {
            "speaker": {"s1": {"wer": 0.2}, "s2": {"wer": 0.3}, "(none)": {"wer": None}},
            "condition": {"clean": {"wer": 0.1}, "noisy": {"wer": 0.4}},
        },
    }


def test_slice_wer_from_summaries_and_table(tmp_path):
    summaries = [summary("last"), summary("best"), summary("last", eval_set="demo.test")]
    out = tmp_path / "slices.png"
    plot_slice_wer(summaries, out, eval_set="demo.dev")
    assert is_png(out)
    out2 = tmp_path / "slices_table.png"
    plot_slice_wer(slice_table(summaries, eval_set="demo.dev"), out2)
    assert is_png(out2)
    with pytest.raises(AsrflowError, match="several eval sets"):
        plot_slice_wer(summaries, tmp_path / "mixed.png")
    with pytest.raises(AsrflowError, match="more than once"):
        plot_slice_wer([summary("last"), summary("last")], tmp_path / "twice.png")


def test_slice_wer_without_slices(tmp_path):
    out = tmp_path / "empty.png"
    plot_slice_wer([{"run": "r", "artifact": "a", "eval_set": "x", "slices": {}}], out)
    assert is_png(out)


# --- error bars of the slice plot -----------------------------------------------------------


def with_intervals(s: dict, half_width: float = 0.05) -> dict:
    """``s`` with each slice value's ``wer_ci_low``/``wer_ci_high`` (``None`` where its WER is)."""
    for values in s["slices"].values():
        for p in values.values():
            wer = p["wer"]
            p["wer_ci_low"] = None if wer is None else max(wer - half_width, 0.0)
            p["wer_ci_high"] = None if wer is None else wer + 2 * half_width
    return s


def error_bars(fig) -> list[ErrorbarContainer]:
    return [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]


def bar_segments(container: ErrorbarContainer) -> list[tuple[float, float, float]]:
    """``(x, low, high)`` of each drawn error bar (vertical segments of its line collection)."""
    (lines,) = container.lines[2]
    segments = [s for s in lines.get_segments() if len(s) == 2 and np.isfinite(s).all()]
    return sorted((float(s[0, 0]), float(s[:, 1].min()), float(s[:, 1].max())) for s in segments)


def test_slice_wer_draws_the_intervals_as_error_bars(tmp_path):
    summaries = [with_intervals(summary("last")), with_intervals(summary("best"), 0.1)]
    out = tmp_path / "slices.png"
    fig = plot_slice_wer(summaries, out)
    assert is_png(out)
    bars = error_bars(fig)
    assert len(bars) == 4  # 2 panels x 2 models
    condition = fig.axes[0]  # fields sorted: condition, speaker
    assert condition.get_title() == "condition"
    # "best" is the first model (sorted); its clean bar: WER 10 %, interval [0 %, 30 %]
    best = next(c for c in condition.containers if isinstance(c, ErrorbarContainer))
    lows_highs = [(round(lo, 6), round(hi, 6)) for _, lo, hi in bar_segments(best)]
    assert lows_highs == [(0.0, 30.0), (30.0, 60.0)]
    # the speaker panel has 3 values; "(none)" has no WER and no bar
    speaker = [c for c in fig.axes[1].containers if isinstance(c, ErrorbarContainer)]
    assert all(len(bar_segments(c)) == 2 for c in speaker)


def test_slice_wer_intervals_from_a_table_and_partly_missing(tmp_path):
    summaries = [with_intervals(summary("last")), summary("best")]  # best: written before CIs
    table = slice_intervals(slice_table(summaries), summaries)
    assert table["wer_ci_low"].notna().sum() == 4 and table["wer_ci_high"].notna().sum() == 4
    fig = plot_slice_wer(table, tmp_path / "slices.png")
    assert is_png(tmp_path / "slices.png")
    assert len(error_bars(fig)) == 2  # only "last" has bars, in both panels
    # an interval that misses the point estimate is clipped, not refused
    table.loc[0, "wer_ci_low"] = table.loc[0, "wer"] + 0.01
    plot_slice_wer(table, tmp_path / "clipped.png")
    assert is_png(tmp_path / "clipped.png")


def test_slice_wer_without_intervals_has_no_error_bars(tmp_path):
    fig = plot_slice_wer([summary("last"), summary("best")], tmp_path / "slices.png")
    assert is_png(tmp_path / "slices.png")
    assert error_bars(fig) == []
    fig = plot_slice_wer(slice_table([summary("last")]), tmp_path / "table.png")
    assert error_bars(fig) == []


# --- forest plot of the WER differences -------------------------------------------------------


def comparison_row(run, artifact, eval_set, diff=None, low=None, high=None, **kw) -> dict:
    return {
        "run": run,
        "artifact": artifact,
        "eval_set": eval_set,
        "current": kw.get("current", True),
        "selected": kw.get("selected", False),
        "wer": 0.2,
        "wer_diff_vs_selected": diff,
        "wer_diff_vs_selected_ci_low": low,
        "wer_diff_vs_selected_ci_high": high,
    }


def comparison(tmp_path: Path) -> Path:
    """A comparison.csv of two runs on dev (one artifact unpaired), an archived row, a failed
    run, and a test set without any paired difference."""
    rows = [
        comparison_row("r1", "best", "demo.dev", 0.0, 0.0, 0.0, selected=True),
        comparison_row("r1", "last", "demo.dev", 0.012, -0.004, 0.03),
        comparison_row("r1", "avg", "demo.dev", -0.02, -0.035, -0.006),
        comparison_row("r1", "old", "demo.dev", current=False),
        comparison_row("r2", "last", "demo.dev", 0.0, 0.0, 0.0, selected=True),
        comparison_row("r2", "best", "demo.dev"),
        comparison_row("r1", "best", "demo.test", selected=True),
        comparison_row("r1", "last", "demo.test"),
        comparison_row("r3", "-", "-"),
    ]
    path = tmp_path / "comparison.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def artists(ax, kind: str, gid: str) -> list:
    return [a for a in getattr(ax, kind) if a.get_gid() == gid]


def test_forest_plot_points_and_intervals_are_the_differences(tmp_path):
    out = tmp_path / "plots" / "differences.png"
    fig = plot_wer_differences(comparison(tmp_path), out)
    assert is_png(out)
    assert [p.name for p in out.parent.iterdir()] == ["differences.png"]
    dev, test = fig.axes
    assert (dev.get_title(), test.get_title()) == ("demo.dev", "demo.test")

    labels = [t.get_text() for t in dev.get_yticklabels()]
    assert labels == [
        "r1 / best (selected)",
        "r1 / avg",
        "r1 / last",
        "r2 / last (selected)",
        "r2 / best",
    ]
    ys = list(dev.get_yticks())
    (zero,) = artists(dev, "lines", "zero")
    assert list(zero.get_xdata()) == [0.0, 0.0]
    (points,) = artists(dev, "lines", "differences")
    got = {labels[ys.index(y)]: round(x, 6) for x, y in zip(*points.get_data(), strict=True)}
    assert got == {"r1 / avg": -2.0, "r1 / last": 1.2}  # percentage points
    (selected,) = artists(dev, "lines", "selected")
    assert sorted(selected.get_data()[0]) == [0.0, 0.0]
    assert {labels[ys.index(y)] for y in selected.get_data()[1]} == {
        "r1 / best (selected)",
        "r2 / last (selected)",
    }
    (intervals,) = artists(dev, "collections", "intervals")
    ends = {
        labels[ys.index(y0)]: (round(x0, 6), round(x1, 6))
        for (x0, y0), (x1, _) in (s for s in intervals.get_segments() if len(s) == 2)
        if np.isfinite([x0, x1]).all()
    }
    assert ends["r1 / avg"] == (-3.5, -0.6)
    assert ends["r1 / last"] == (-0.4, 3.0)
    assert ends["r2 / last (selected)"] == (0.0, 0.0)
    assert "r2 / best" not in ends
    notes = [t for t in dev.texts if t.get_text() == NO_DIFFERENCE]
    assert [labels[ys.index(t.get_position()[1])] for t in notes] == ["r2 / best"]

    # the test set has no paired difference at all: its panel says so
    assert [t.get_text() for t in test.texts] == [f"{NO_DIFFERENCE}s on demo.test"]
    assert artists(test, "lines", "differences") == []


def test_forest_plot_of_one_run_labels_artifacts_only(tmp_path):
    rows = [
        comparison_row("r1", "best", "demo.dev", 0.0, 0.0, 0.0, selected=True),
        comparison_row("r1", "last", "demo.dev", 0.01, 0.0, 0.02),
    ]
    fig = plot_wer_differences(pd.DataFrame(rows), tmp_path / "d.png")
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["best (selected)", "last"]


def test_forest_plot_without_evaluations_and_of_other_csv(tmp_path):
    fig = plot_wer_differences(pd.DataFrame([comparison_row("r3", "-", "-")]), tmp_path / "d.png")
    assert is_png(tmp_path / "d.png")
    assert [t.get_text() for t in fig.axes[0].texts] == ["no evaluations of any run"]
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(AsrflowError, match="not a comparison table"):
        plot_wer_differences(tmp_path / "x.csv", tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()
