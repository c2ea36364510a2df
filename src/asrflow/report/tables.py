"""The comparison table written out: the CSV (every column, full hashes), Markdown for people
(percentages with their 95 % intervals in brackets, short hashes, selected, failed and archived
rows marked, a warning when results are not comparable, a note for each run whose dev set
measures seen speakers only) and the HTML page (:mod:`asrflow.report.page`).

Example::

    write_report_tables(comparison_table(train, evals, selections), "report/comparison.csv",
                        "report/comparison.md", "report/comparison.html")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from asrflow.io import write_text
from asrflow.report.cells import (
    BASELINE_CELL,
    BASELINE_NOTE,
    BASELINE_VIEW,
    INTERVAL_NOTE,
    PARENT_NOTE,
    PARENT_VIEW,
    REPLICA_NOTE,
    as_text,
    change_text,
    code_notes,
    compared,
    dev_notes,
    display_table,
    has_parents,
    replica_view,
)
from asrflow.report.comparison import NONE, check_contracts
from asrflow.report.figures import PageFigure
from asrflow.report.page import report_html
from asrflow.report.plans import plans_markdown
from asrflow.types import Pathlike

__all__ = ["markdown_table", "report_html", "report_markdown", "write_report_tables"]


def _vs_baseline(row: Any) -> str:
    """`` (vs baseline r1: recipe: optim.lr ...)`` for a run listed outside the results table."""
    change = change_text(row)
    if not change or change == BASELINE_CELL:
        return ""
    return f" (vs baseline {row.baseline_run}: {_md_cell(change)})"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub pipe table of string cells (no ``tabulate`` needed)."""
    header = "| " + " | ".join(_md_cell(str(c)) for c in table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = [
        "| " + " | ".join(_md_cell(as_text(v)) for v in row) + " |"
        for row in table.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def report_markdown(
    df: pd.DataFrame,
    replicas: pd.DataFrame | None = None,
    plans: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The comparison as Markdown: contract line or warnings, results, seed replicas
    (``replicas``: :func:`asrflow.report.replicas.replica_table`), failed runs, how each
    ``recipe: auto`` run's values were derived (``plans``: run -> its summary's plan),
    archive."""
    lines = ["# Model comparison", ""]
    notes = check_contracts(df)
    contracts = sorted(df.loc[df["current"], "contract_sha256"].dropna().unique())
    if notes:
        lines += ["> **Warning: results below are not all comparable.**", ">"]
        lines += [f"> - {n}" for n in notes]
        lines.append("")
    elif contracts:
        lines += [f"Scoring contract: `{contracts[0]}` (all current results).", ""]
    lines += [f"> {n}\n" for n in code_notes(df)]
    current = df[df["current"] & (df["eval_set"] != NONE)]
    lines += ["## Results", ""]
    if current.empty:
        lines += ["No evaluation results.", ""]
    else:
        view = display_table(current).drop(columns=["current"])
        if not compared(df):
            view = view.drop(columns=BASELINE_VIEW)
        if not has_parents(df):
            view = view.drop(columns=PARENT_VIEW)
        lines += [markdown_table(view), ""]
        lines += [f"> {_md_cell(n)}\n" for n in dev_notes(df)]
        lines += [INTERVAL_NOTE, ""]
        lines += [BASELINE_NOTE, ""] if compared(df) else []
        lines += [PARENT_NOTE, ""] if has_parents(df) else []
    if replicas is not None and not replicas.empty:
        lines += ["## Seed replicas", "", markdown_table(replica_view(replicas)), ""]
        lines += [REPLICA_NOTE, ""]
    failed = df[df["status"] == "failed"].drop_duplicates("run")
    if not failed.empty:
        lines += ["## Failed runs", ""]
        lines += [
            f"- **{r.run}**: {_md_cell(as_text(r.error)) or 'no error message recorded'}"
            + _vs_baseline(r)
            for r in failed.itertuples()
        ]
        lines.append("")
    if plans:
        lines += plans_markdown(plans)
    pending = df[df["current"] & (df["eval_set"] == NONE) & (df["status"] != "failed")]
    if not pending.empty:
        lines += ["## Not evaluated", ""]
        lines += [
            f"- {r.run} (status {as_text(r.status)}){_vs_baseline(r)}" for r in pending.itertuples()
        ]
        lines.append("")
    archived = df[~df["current"]]
    if not archived.empty:
        lines += ["## Earlier revisions (archived)", ""]
        lines += [
            "Results of models or eval data that are no longer current, kept by artifact hash.",
            "",
        ]
        view = display_table(archived).drop(
            columns=[
                "rank",
                "status",
                "current",
                "WER diff vs selected",
                *BASELINE_VIEW,
                "data sha",
                "tokenizer sha",
                "budget",
            ]
        )
        lines += [markdown_table(view), ""]
    return "\n".join(lines)


def write_report_tables(
    df: pd.DataFrame,
    csv_path: Pathlike,
    md_path: Pathlike,
    html_path: Pathlike,
    replicas: pd.DataFrame | None = None,
    plans: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    selections: Mapping[str, Mapping[str, Any]] | None = None,
    figures: Sequence[PageFigure] = (),
) -> None:
    """Atomically write the table as CSV (every column, full hashes), Markdown and HTML (with
    the seed replica table ``replicas`` and the runs' ``plans``, if any; the page also gets a
    summary card per run from the runs' ``selections`` and the ``figures`` inline)."""
    write_text(csv_path, df.to_csv(index=False, lineterminator="\n"))
    write_text(md_path, report_markdown(df, replicas, plans))
    write_text(html_path, report_html(df, replicas, plans, selections=selections, figures=figures))
