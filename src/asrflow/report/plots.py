"""Figures of the report: learning curves of a run, and WER per slice of an eval set.

Figures are built on :class:`matplotlib.figure.Figure` directly (no ``pyplot`` state, rendered by
Agg) and written atomically through :func:`asrflow.io.atomic_output`.

Example::

    plot_learning_curves("results/runs/r/train/artifacts/csv/metrics.csv", "report/r.curves.png")
    plot_slice_wer(eval_summaries, "report/demo.dev.slices.png", eval_set="demo.dev")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from asrflow.errors import AsrflowError
from asrflow.io import atomic_output
from asrflow.report.comparison import slice_table
from asrflow.types import Pathlike

DPI = 110

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
) -> None:
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


def plot_slice_wer(
    summaries: pd.DataFrame | Sequence[Mapping[str, Any]],
    out_png: Pathlike,
    eval_set: str | None = None,
) -> None:
    """Grouped bars of WER per slice value, one bar per run/artifact, one subplot per slice field.

    ``summaries`` are eval summaries (their ``"slices"`` are read) or a table shaped like
    :func:`asrflow.report.comparison.slice_table`. They must cover one eval set, or ``eval_set``
    picks it. Bars of different scoring contracts are drawn but the title says they are not
    comparable.
    """
    table = summaries if isinstance(summaries, pd.DataFrame) else slice_table(summaries)
    table, name = _one_eval_set(table, eval_set)
    fields = sorted(table["field"].unique())
    contracts = table["contract_sha256"].dropna().unique() if "contract_sha256" in table else []

    fig = Figure(figsize=(max(6.0, 4.0 * max(len(fields), 1)), 4.5), layout="constrained")
    if not fields:
        ax = fig.subplots()
        _not_logged(ax, "slices")
        fig.suptitle(f"WER per slice: {name}")
        save_figure(fig, out_png)
        return
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
        wer = rows.set_index(rows["value"].astype(str))["wer"].reindex(values)
        ax.bar(x + (i - (len(models) - 1) / 2) * width, 100 * wer.to_numpy(), width, label=label)
    if len(values) > 4:
        ax.set_xticks(x, values, rotation=30, ha="right")
    else:
        ax.set_xticks(x, values)
    ax.set_title(field)
    ax.set_ylabel("WER %")
    ax.grid(axis="y", alpha=0.3)
