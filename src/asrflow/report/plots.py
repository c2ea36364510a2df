"""Figures of the report: learning curves of a run, WER per slice of an eval set, and the WER
differences of every artifact to its run's selected one (a forest plot).

Figures are built on :class:`matplotlib.figure.Figure` directly (no ``pyplot`` state, rendered by
Agg) and written atomically through :func:`asrflow.io.atomic_output`.

Example::

    plot_learning_curves("results/runs/r/train/artifacts/csv/metrics.csv", "report/r.curves.png")
    plot_slice_wer(eval_summaries, "report/demo.dev.slices.png", eval_set="demo.dev")
    plot_wer_differences("results/report/comparison.csv", "report/differences.png")

Each function returns the figure it wrote, for a caller (or test) to inspect.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from asrflow.errors import AsrflowError
from asrflow.io import atomic_output
from asrflow.report.comparison import NONE
from asrflow.report.differences import DIFF_COLUMNS
from asrflow.report.slices import slice_table
from asrflow.types import Pathlike

DPI = 110

NO_DIFFERENCE = "no paired difference"
"""Said in the forest plot for a row (or a whole eval set) without a WER difference."""

# (panel title, y label, [(column, legend label)], log scale)
_PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...], bool], ...] = (
    (
        "Loss per token",
        "loss",
        (("train/loss_per_token", "train"), ("valid/loss", "valid")),
        False,
    ),
    ("Validation error rates", "rate", (("valid/wer", "WER"), ("valid/cer", "CER")), False),
    ("Learning rate", "lr", (("lr", "lr"),), False),
    ("Gradient norm (before clipping)", "norm", (("train/grad_norm", "grad norm"),), True),
)


def save_figure(fig: Figure, out_png: Pathlike) -> None:
    """Write ``fig`` as PNG atomically (same bytes as before leave the file untouched)."""
    with atomic_output(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})


def png_bytes(fig: Figure) -> bytes:
    """``fig`` as the PNG bytes :func:`save_figure` writes (for a page that embeds it)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _lr_column(columns: Sequence[str]) -> str | None:
    """Lightning's LearningRateMonitor logs ``lr`` or ``lr-<optimizer>``; take the first."""
    if "lr" in columns:
        return "lr"
    return next((c for c in columns if c.startswith(("lr-", "lr/"))), None)


def _not_logged(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not logged", ha="center", va="center", transform=ax.transAxes)
    # not set_xticks([]): the x axis is shared, that would clear the other panels' ticks too
    ax.tick_params(left=False, labelleft=False)


def plot_learning_curves(
    metrics_csv: Pathlike, out_png: Pathlike, title: str | None = None
) -> Figure:
    """Four panels from a Lightning ``CSVLogger`` ``metrics.csv`` against optimizer step.

    Train and valid loss per token; valid WER and CER; learning rate; gradient norm. A panel
    whose columns are absent (or all empty) says "not logged" instead.
    """
    path = Path(metrics_csv)
    try:
        metrics = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise AsrflowError(f"{path}: cannot read training metrics ({e})") from e
    if "step" not in metrics.columns:
        raise AsrflowError(f"{path}: no 'step' column; is this a Lightning CSVLogger metrics.csv?")
    lr = _lr_column(list(metrics.columns))

    fig = Figure(figsize=(11, 7.5), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True).ravel()
    for ax, (panel, ylabel, series, log) in zip(axes, _PANELS, strict=True):
        if panel == "Learning rate" and lr is not None:
            series = ((lr, "lr"),)
        if panel == "Loss per token" and "train/loss_per_token" not in metrics.columns:
            series = (("train/loss", "train"), *series[1:])
        ax.set_title(panel)
        drawn = False
        for column, label in series:
            if column not in metrics.columns:
                continue
            points = metrics[["step", column]].dropna()
            if points.empty:
                continue
            marker = "o" if column.startswith("valid/") else None
            ax.plot(points["step"], points[column], label=label, marker=marker, markersize=3)
            drawn = True
        if not drawn:
            _not_logged(ax, " / ".join(c for c, _ in series))
            continue
        ax.set_ylabel(ylabel)
        if log and (metrics[series[0][0]].dropna() > 0).all():
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend()
    for ax in axes[2:]:
        ax.set_xlabel("step")
    fig.suptitle(title or f"Learning curves: {path}")
    save_figure(fig, out_png)
    return fig


def plot_slice_wer(
    summaries: pd.DataFrame | Sequence[Mapping[str, Any]],
    out_png: Pathlike,
    eval_set: str | None = None,
) -> Figure:
    """Grouped bars of WER per slice value, one bar per run/artifact, one subplot per slice field,
    each with an error bar from the slice's 95 % interval (``wer_ci_low`` .. ``wer_ci_high``).

    ``summaries`` are eval summaries (their ``"slices"`` are read) or a table shaped like
    :func:`asrflow.report.slices.slice_table`, optionally with ``wer_ci_low`` and
    ``wer_ci_high`` columns. A slice without an interval (a summary written before intervals
    existed) gets a bar without an error bar. They must cover one eval set, or ``eval_set``
    picks it. Bars of different scoring contracts are drawn but the title says they are not
    comparable.
    """
    if isinstance(summaries, pd.DataFrame):
        table = summaries
    else:
        table = slice_intervals(slice_table(summaries), summaries)
    table, name = _one_eval_set(table, eval_set)
    fields = sorted(table["field"].unique())
    contracts = table["contract_sha256"].dropna().unique() if "contract_sha256" in table else []

    fig = Figure(figsize=(max(6.0, 4.0 * max(len(fields), 1)), 4.5), layout="constrained")
    if not fields:
        ax = fig.subplots()
        _not_logged(ax, "slices")
        fig.suptitle(f"WER per slice: {name}")
        save_figure(fig, out_png)
        return fig
    axes = np.atleast_1d(fig.subplots(1, len(fields), squeeze=False)[0])
    models = table[["run", "artifact"]].drop_duplicates().sort_values(["run", "artifact"])
    labels = [
        f"{r}/{a}" if models["run"].nunique() > 1 else str(a)
        for r, a in models.itertuples(index=False)
    ]
    for ax, field in zip(axes, fields, strict=True):
        _slice_bars(ax, field, table[table["field"] == field], models, labels)
    axes[0].legend(fontsize="small")
    title = f"WER per slice: {name}"
    if len(contracts) > 1:
        title += f" (WARNING: {len(contracts)} scoring contracts, not comparable)"
    fig.suptitle(title)
    save_figure(fig, out_png)
    return fig


def slice_intervals(table: pd.DataFrame, summaries: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """``table`` (a :func:`~asrflow.report.slices.slice_table` of ``summaries``) with the
    columns ``wer_ci_low`` and ``wer_ci_high`` of each slice value (NaN where the summary has
    none); unchanged if it has them already."""
    if {"wer_ci_low", "wer_ci_high"} <= set(table.columns):
        return table
    bounds = {
        (s.get("run"), s.get("artifact"), s.get("eval_set"), field, value): (
            p.get("wer_ci_low"),
            p.get("wer_ci_high"),
        )
        for s in summaries
        for field, values in (s.get("slices") or {}).items()
        for value, p in values.items()
    }
    keys = table[["run", "artifact", "eval_set", "field", "value"]].itertuples(index=False)
    pairs = [bounds.get(tuple(k), (None, None)) for k in keys]
    table = table.copy()
    for i, column in enumerate(("wer_ci_low", "wer_ci_high")):
        values = pd.Series([p[i] for p in pairs], index=table.index, dtype=object)
        table[column] = pd.to_numeric(values, errors="coerce").astype("float64")
    return table


def _one_eval_set(table: pd.DataFrame, eval_set: str | None) -> tuple[pd.DataFrame, str]:
    """The rows of ``eval_set`` (or all) and the eval set's name; an error when they cover
    several eval sets or one model twice."""
    if eval_set is not None:
        table = table[table["eval_set"] == eval_set]
    sets = sorted(table["eval_set"].dropna().unique())
    if len(sets) > 1:
        raise AsrflowError(
            f"slice plot: results of several eval sets ({', '.join(sets)}); pick one with eval_set"
        )
    name = sets[0] if sets else (eval_set or "")
    dup = table.duplicated(["run", "artifact", "field", "value"])
    if dup.any():
        first = table[dup].iloc[0]
        raise AsrflowError(
            f"slice plot of {name}: {first['run']}/{first['artifact']} appears more than once; "
            "pass one eval summary per model (current results only)"
        )
    return table, name


def _slice_bars(
    ax: Axes, field: str, part: pd.DataFrame, models: pd.DataFrame, labels: Sequence[str]
) -> None:
    """The panel of slice ``field`` (its rows ``part``): a group of bars per value, one bar per
    model (``labels``)."""
    width = 0.8 / max(len(models), 1)
    values = sorted(part["value"].astype(str).unique())
    x = np.arange(len(values))
    for i, ((run, artifact), label) in enumerate(
        zip(models.itertuples(index=False), labels, strict=True)
    ):
        rows = part[(part["run"] == run) & (part["artifact"] == artifact)]
        rows = rows.set_index(rows["value"].astype(str)).reindex(values)
        wer = 100 * rows["wer"].to_numpy(dtype="float64")
        ax.bar(
            x + (i - (len(models) - 1) / 2) * width,
            wer,
            width,
            label=label,
            yerr=_slice_errors(rows, wer),
            error_kw={"capsize": 2, "elinewidth": 1},
        )
    if len(values) > 4:
        ax.set_xticks(x, values, rotation=30, ha="right")
    else:
        ax.set_xticks(x, values)
    ax.set_title(field)
    ax.set_ylabel("WER %")
    ax.grid(axis="y", alpha=0.3)


def _slice_errors(rows: pd.DataFrame, wer: np.ndarray) -> np.ndarray | None:
    """Asymmetric error bars (percent, ``[below, above]``) of one model's bars from the rows'
    ``wer_ci_low``/``wer_ci_high``; NaN (no bar) where a bound is missing, None where all are.
    Clipped at 0: a percentile interval need not contain the pooled rate."""
    if not {"wer_ci_low", "wer_ci_high"} <= set(rows.columns):
        return None
    low, high = (100 * rows[c].to_numpy(dtype="float64") for c in ("wer_ci_low", "wer_ci_high"))
    missing = np.isnan(low) | np.isnan(high) | np.isnan(wer)
    if missing.all():
        return None
    errors = np.clip(np.stack([wer - low, high - wer]), 0, None)
    errors[:, missing] = np.nan
    return errors


# --- forest plot of the WER differences to each run's selected artifact ------------------------


def plot_wer_differences(comparison: pd.DataFrame | Pathlike, out_png: Pathlike) -> Figure:
    """Write :func:`wer_difference_figure` of ``comparison`` (the table of
    :func:`asrflow.report.comparison.comparison_table` or its CSV) to ``out_png``."""
    fig = wer_difference_figure(comparison)
    save_figure(fig, out_png)
    return fig


def wer_difference_figure(comparison: pd.DataFrame | Pathlike) -> Figure:
    """A forest plot of each artifact's WER difference to its run's selected artifact: one panel
    per eval set, one line per current evaluation, grouped by run (the selected artifact first).

    ``comparison``: the table of :func:`asrflow.report.comparison.comparison_table` or its CSV.
    A line shows ``wer_diff_vs_selected`` in points as a dot and its paired 95 % interval as a
    horizontal bar; the selected artifact (0, [0, 0]) is a diamond labelled "(selected)". A line
    without a difference (not paired: other utterances or contract, no selection) says
    :data:`NO_DIFFERENCE`, and so does a panel without any. A dashed vertical line marks 0: left
    of it, fewer errors than the selected artifact. Archived rows and failed runs are left out.
    """
    rows = _difference_rows(comparison)
    sets = list(dict.fromkeys(rows["eval_set"]))
    parts = [rows[rows["eval_set"] == s] for s in sets]
    heights = [2.0 + len(part) + part["run"].nunique() for part in parts]
    fig = Figure(figsize=(9.0, 1.0 + 0.28 * sum(heights or [4.0])), layout="constrained")
    if not sets:
        _note(fig.subplots(), "no evaluations of any run")
    else:
        axes = fig.subplots(len(sets), 1, squeeze=False, height_ratios=heights)[:, 0]
        for ax, eval_set, part in zip(axes, sets, parts, strict=True):
            _forest_panel(ax, eval_set, part)
    fig.suptitle("WER difference to each run's selected artifact, paired 95 % interval")
    return fig


def _difference_rows(comparison: pd.DataFrame | Pathlike) -> pd.DataFrame:
    """The current evaluated rows of the comparison table, sorted by run (selected first), with
    boolean ``selected`` and numeric differences."""
    if isinstance(comparison, pd.DataFrame):
        df, source = comparison, "comparison table"
    else:
        source = str(comparison)
        try:
            df = pd.read_csv(comparison)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
            raise AsrflowError(f"{source}: cannot read the comparison table ({e})") from e
    missing = {"run", "artifact", "eval_set", "selected", "current", *DIFF_COLUMNS} - set(df)
    if missing:
        raise AsrflowError(f"{source}: not a comparison table (no {', '.join(sorted(missing))})")
    keep = df["current"].map(_flag) & df["eval_set"].notna() & (df["eval_set"] != NONE)
    rows = df[keep].copy()
    rows["selected"] = rows["selected"].map(_flag).astype(bool)
    for column in DIFF_COLUMNS:
        rows[column] = pd.to_numeric(rows[column], errors="coerce").astype("float64")
    order = ["run", "selected", "artifact"]
    return rows.sort_values(order, ascending=[True, False, True], kind="stable")


def _flag(value: Any) -> bool:
    """A boolean cell of the table, also as the CSV reads it back (``True``/``False`` text)."""
    return str(value).strip().lower() in ("true", "1")


def _note(ax: Axes, text: str) -> None:
    """``text`` in the middle of an otherwise empty panel."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.tick_params(left=False, labelleft=False, bottom=False, labelbottom=False)


def _forest_panel(ax: Axes, eval_set: str, rows: pd.DataFrame) -> None:
    """Eval set ``eval_set``'s panel: its ``rows`` as points (artists with ``gid``s
    ``differences``, ``selected``, ``intervals``, ``zero`` for a reader of the figure)."""
    ax.set_title(eval_set)
    diff, low, high = (100 * rows[c].to_numpy(dtype="float64") for c in DIFF_COLUMNS)
    if np.isnan(diff).all():
        _note(ax, f"{NO_DIFFERENCE}s on {eval_set}")
        return
    several = rows["run"].nunique() > 1
    y, labels, pos = [], [], 0.0
    for i, (run, artifact, selected) in enumerate(rows[["run", "artifact", "selected"]].values):
        if i and run != rows["run"].iloc[i - 1]:
            pos += 0.8  # a gap between runs
        y.append(pos)
        pos += 1.0
        label = f"{run} / {artifact}" if several else str(artifact)
        labels.append(label + (" (selected)" if selected else ""))
    y_arr, chosen, paired = np.array(y), rows["selected"].to_numpy(dtype=bool), ~np.isnan(diff)
    ax.axvline(0.0, color="0.4", linestyle="--", linewidth=1, zorder=0, gid="zero")
    ax.hlines(y_arr[paired], low[paired], high[paired], color="C0", linewidth=2, gid="intervals")
    for mask, marker, colour, gid in (
        (paired & ~chosen, "o", "C0", "differences"),
        (paired & chosen, "D", "C3", "selected"),
    ):
        ax.plot(diff[mask], y_arr[mask], marker, color=colour, linestyle="none", gid=gid)
    for at in y_arr[~paired]:
        ax.text(
            0.01,
            at,
            NO_DIFFERENCE,
            transform=ax.get_yaxis_transform(),
            va="center",
            fontsize="small",
            fontstyle="italic",
            color="0.3",
        )
    ax.set_yticks(y_arr, labels)
    ax.set_ylim(y_arr.max() + 0.7, y_arr.min() - 0.7)  # first row on top
    ax.set_xlabel("WER difference to the run's selected artifact (points; < 0: fewer errors)")
    ax.grid(axis="x", alpha=0.3)
