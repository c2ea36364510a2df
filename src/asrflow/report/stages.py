"""What the report rules call: files in, files out (the tables and plots themselves are built in
:mod:`asrflow.report.comparison`, :mod:`asrflow.report.tables` and :mod:`asrflow.report.plots`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from asrflow.evaluate.archive import load_archive
from asrflow.evaluate.paired import UtteranceErrors, read_utterance_errors
from asrflow.io import read_json, write_text
from asrflow.provenance import RECORD_SUFFIX, InvalidRecord, read_record
from asrflow.report.changes import baseline_of
from asrflow.report.comparison import comparison_table
from asrflow.report.differences import EvalKey, Replicas
from asrflow.report.figures import DIFFERENCES, PageFigure, figures_from_files
from asrflow.report.plots import (
    plot_learning_curves,
    plot_slice_wer,
    plot_wer_differences,
    png_bytes,
    wer_difference_figure,
)
from asrflow.report.replicas import replica_table
from asrflow.report.tables import write_report_tables
from asrflow.status import Checkout, changed_code
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


def build_report(
    *,
    train_summaries: Sequence[Pathlike],
    evaluations: Sequence[Pathlike],
    selections: Sequence[Pathlike],
    archive_dir: Pathlike | None,
    csv_path: Pathlike,
    md_path: Pathlike,
    html_path: Pathlike,
    utterances: Sequence[Pathlike] = (),
    baseline_run: str | None = None,
    replicas: Replicas | None = None,
    replicas_path: Pathlike | None = None,
    plots: Sequence[Pathlike] = (),
) -> pd.DataFrame:
    """The comparison over every run x artifact x eval set, failed runs and earlier results
    (``archive_dir``, kept by artifact hash) included. ``code_changed`` names, per row, the
    asrflow modules that trained or evaluated it and differ in this checkout now.
    ``utterances``: the evaluations' ``utterances.csv`` (each beside its ``summary.json``), for
    the WER differences against each run's selected artifact and the baseline run's.
    ``baseline_run`` (``report.baseline_run``; default: the first of ``train_summaries``, which
    come in config order): the run every other is compared with, what differs from it read from
    the train summaries and their provenance records. ``replicas`` (:func:`asrflow.replicas.
    replica_runs`): which runs are seed replicas of which; their mean, spread and interval go to
    ``replicas_path`` (:func:`asrflow.report.replicas.replica_table`) and the tables.
    ``plots``: the PNGs of the plot rules (learning curves, slice plots, batch audits;
    :func:`asrflow.report.figures.figure_kind`) that the HTML page inlines, with the forest plot
    of the WER differences drawn here from the table (the same figure rule ``plot_differences``
    writes from its CSV)."""
    checkout = Checkout()
    trains: dict[str, dict] = {}
    records: dict[str, dict] = {}
    train_code: dict[str, list[str]] = {}
    for path in train_summaries:
        summary = read_json(path)
        trains[summary["run"]] = summary
        record = _record(path)
        if record is not None:
            records[summary["run"]] = record
        train_code[summary["run"]] = changed_code(record, checkout) if record else []
    selected = {s["run"]: s for s in map(read_json, selections)}
    archived = load_archive(archive_dir) if archive_dir and Path(archive_dir).is_dir() else []
    evals = _evaluations(evaluations, train_code, checkout)
    errors = _utterance_errors(evaluations, evals, utterances)
    df = comparison_table(
        trains,
        evals,
        selected,
        archived,
        errors,
        train_records=records,
        baseline_run=baseline_run,
        replicas=replicas,
    )
    baseline = baseline_of(list(trains), baseline_run)
    aggregated = replica_table(df, errors, replicas or {}, baseline)
    if replicas_path is not None:
        write_text(replicas_path, aggregated.to_csv(index=False, lineterminator="\n"))
    plans = {run: t["plan"] for run, t in trains.items() if t.get("plan")}
    figures = page_figures(df, plots)
    write_report_tables(
        df, csv_path, md_path, html_path, aggregated, plans, selections=selected, figures=figures
    )
    log.info(
        "comparison: %d rows (%d runs, %d from earlier revisions)",
        len(df),
        len(trains),
        int((~df["current"].astype(bool)).sum()) if "current" in df else 0,
    )
    return df


def _evaluations(
    evaluations: Sequence[Pathlike], train_code: Mapping[str, list[str]], checkout: Checkout
) -> list[dict]:
    """The eval summaries, each with ``code_changed``: the asrflow modules that trained
    (``train_code``, per run) or evaluated it and differ in ``checkout`` now."""
    evals = []
    for path in evaluations:
        summary = read_json(path)
        record = _record(path)
        changed = list(train_code.get(summary.get("run"), []))
        changed += changed_code(record, checkout) if record else []
        summary["code_changed"] = sorted(set(changed))
        evals.append(summary)
    return evals


def page_figures(df: pd.DataFrame, plots: Sequence[Pathlike]) -> list[PageFigure]:
    """What the HTML page inlines: the forest plot of ``df``'s WER differences (the figure rule
    ``plot_differences`` draws from the CSV, drawn here in memory), then the ``plots``."""
    forest = PageFigure(DIFFERENCES, png_bytes(wer_difference_figure(df)))
    return [forest, *figures_from_files(plots)]


def _utterance_errors(
    evaluations: Sequence[Pathlike],
    summaries: Sequence[dict],
    utterances: Sequence[Pathlike],
) -> dict[EvalKey, UtteranceErrors]:
    """Per-utterance errors of each evaluation whose ``utterances.csv`` (in the directory of its
    ``summary.json``) is among ``utterances``."""
    by_dir = {Path(p).parent: p for p in utterances}
    out = {}
    for path, summary in zip(evaluations, summaries, strict=True):
        csv_path = by_dir.get(Path(path).parent)
        if csv_path is not None:
            key = (summary.get("run"), summary.get("artifact"), summary.get("eval_set"))
            out[key] = read_utterance_errors(csv_path)
    return out


def _record(output: Pathlike) -> dict | None:
    """The provenance record of the step that made ``output`` (``None`` when it has none, or
    one that does not read as a record). What ``code_changed`` is taken from: the asrflow
    modules (and script) that made ``output`` and differ in this checkout now."""
    record = Path(f"{output}{RECORD_SUFFIX}")
    if not record.is_file():
        return None
    try:
        return read_record(record)
    except InvalidRecord:
        return None


def learning_curves(artifacts: Pathlike, out_png: Pathlike, run: str) -> None:
    plot_learning_curves(Path(artifacts) / "csv" / "metrics.csv", out_png, title=run)


def slice_plot(evaluations: Sequence[Pathlike], out_png: Pathlike, eval_set: str) -> None:
    plot_slice_wer([read_json(p) for p in evaluations], out_png, eval_set=eval_set)


def difference_plot(comparison_csv: Pathlike, out_png: Pathlike) -> None:
    plot_wer_differences(comparison_csv, out_png)
