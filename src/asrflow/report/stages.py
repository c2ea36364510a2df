"""What the report rules call: files in, files out (the tables and plots themselves are built in
:mod:`asrflow.report.comparison`, :mod:`asrflow.report.tables` and :mod:`asrflow.report.plots`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from asrflow.evaluate.archive import load_archive
from asrflow.evaluate.paired import UtteranceErrors, read_utterance_errors
from asrflow.io import read_json
from asrflow.provenance import RECORD_SUFFIX, InvalidRecord, read_record
from asrflow.report.comparison import comparison_table
from asrflow.report.differences import EvalKey
from asrflow.report.plots import plot_learning_curves, plot_slice_wer
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
) -> pd.DataFrame:
    """The comparison over every run x artifact x eval set, failed runs and earlier results
    (``archive_dir``, kept by artifact hash) included. ``code_changed`` names, per row, the
    asrflow modules that trained or evaluated it and differ in this checkout now.
    ``utterances``: the evaluations' ``utterances.csv`` (each beside its ``summary.json``), for
    the WER differences against each run's selected artifact."""
    checkout = Checkout()
    trains: dict[str, dict] = {}
    train_code: dict[str, list[str]] = {}
    for path in train_summaries:
        summary = read_json(path)
        trains[summary["run"]] = summary
        train_code[summary["run"]] = _changed_code(path, checkout)
    selected = {s["run"]: s for s in map(read_json, selections)}
    archived = load_archive(archive_dir) if archive_dir and Path(archive_dir).is_dir() else []
    evals = []
    for path in evaluations:
        summary = read_json(path)
        changed = train_code.get(summary.get("run"), []) + _changed_code(path, checkout)
        summary["code_changed"] = sorted(set(changed))
        evals.append(summary)
    errors = _utterance_errors(evaluations, evals, utterances)
    df = comparison_table(trains, evals, selected, archived, errors)
    write_report_tables(df, csv_path, md_path, html_path)
    log.info(
        "comparison: %d rows (%d runs, %d from earlier revisions)",
        len(df),
        len(trains),
        int((~df["current"].astype(bool)).sum()) if "current" in df else 0,
    )
    return df


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


def _changed_code(output: Pathlike, checkout: Checkout) -> list[str]:
    """The asrflow modules (and script) that made ``output`` and differ in this checkout now
    (from its provenance record; none when it has no record)."""
    record = Path(f"{output}{RECORD_SUFFIX}")
    if not record.is_file():
        return []
    try:
        return changed_code(read_record(record), checkout)
    except InvalidRecord:
        return []


def learning_curves(artifacts: Pathlike, out_png: Pathlike, run: str) -> None:
    plot_learning_curves(Path(artifacts) / "csv" / "metrics.csv", out_png, title=run)


def slice_plot(evaluations: Sequence[Pathlike], out_png: Pathlike, eval_set: str) -> None:
    plot_slice_wer([read_json(p) for p in evaluations], out_png, eval_set=eval_set)
