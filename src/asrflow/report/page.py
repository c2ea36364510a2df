"""The comparison as one self-contained HTML page (``results/report/comparison.html``).

From top to bottom:

- warnings: results that are not comparable, rows made by code that has changed since, runs
  chosen on a dev set of seen speakers only;
- a summary card per run (:mod:`asrflow.report.cards`, drawn by :mod:`asrflow.report.card_html`);
- the figures inline (PNG as ``data:`` URIs, :mod:`asrflow.report.figures`): the forest plot of
  the WER differences, then each run's learning curves, slice plots and batch audit;
- the results, one sortable table per eval set (decoding settings and hashes are in the cards,
  once per run; the CSV keeps every column);
- the seed replicas, the runs' derived recipes and the earlier revisions (archived).

Plain HTML, CSS and a little JavaScript (:mod:`asrflow.report.assets`): no web server, no
library, no file beside it. Every text from the data (run names, error messages, settings) is
escaped.

Example::

    text = report_html(df, replicas, plans, selections=selections, figures=figures)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

import pandas as pd

from asrflow.report.assets import CSS, SORT_JS
from asrflow.report.card_html import card_html, slug
from asrflow.report.cards import RunCard, run_cards
from asrflow.report.cells import (
    BASELINE_NOTE,
    BASELINE_VIEW,
    INTERVAL_NOTE,
    PARENT_NOTE,
    PARENT_VIEW,
    REPLICA_NOTE,
    as_text,
    code_notes,
    compared,
    dev_notes,
    display_table,
    has_parents,
    missing,
    replica_view,
    short,
)
from asrflow.report.comparison import NONE, check_contracts
from asrflow.report.figures import DIFFERENCES, PageFigure
from asrflow.report.plans import plans_html

RESULT_COLUMNS = {
    "run": "run",
    "artifact": "artifact",
    "WER %": "wer",
    "CER %": "cer",
    "WER diff vs selected": "wer_diff_vs_selected",
    "WER diff vs baseline": "wer_diff_vs_baseline",
    "WER diff vs parent": "wer_diff_vs_parent",
    "rank": "rank",
    "scored": "utterances_scored",
    "RTF": "rtf",
    "notes": None,
}
"""Columns of the per eval set tables: :func:`~asrflow.report.cells.display_table`'s column ->
the comparison column it sorts by (``None``: by its text)."""

ARCHIVE_COLUMNS = {
    "run": "run",
    "artifact": "artifact",
    "WER %": "wer",
    "CER %": "cer",
    "RTF": "rtf",
    "artifact sha": None,
    "recipe sha": None,
    "data sha": None,
    "notes": None,
}
"""Columns of the archived results' tables."""


def _e(value: Any) -> str:
    """``value`` as escaped HTML text (quotes included: safe in attributes too)."""
    return escape(as_text(value), quote=True)


def _cell(text: str, sort: Any = None) -> str:
    """A table cell; ``sort``: its ``data-sort`` value (a number or text; none where missing)."""
    if sort is None or missing(sort):
        return f"<td>{_e(text)}</td>"
    value = sort if isinstance(sort, str) else f"{float(sort):.10g}"
    return f'<td data-sort="{_e(value)}">{_e(text)}</td>'


def sortable_table(
    view: pd.DataFrame,
    raw: pd.DataFrame | None = None,
    sort_by: Mapping[str, str | None] | None = None,
    classes: Sequence[str] | None = None,
    attrs: Mapping[str, str] | None = None,
) -> str:
    """A ``table.results.sortable`` of the string cells of ``view``; a column of ``sort_by``
    (column -> column of ``raw``, the same rows) sorts by ``raw``'s value, the others by their
    text; ``classes``: a class per row (``""``: none); ``attrs``: the table's attributes
    (``data-*``)."""
    heads = "".join(f"<th>{_e(c)}</th>" for c in view.columns)
    rows = []
    for i, cells in enumerate(view.itertuples(index=False)):
        tds = []
        for column, text in zip(view.columns, cells, strict=True):
            key = (sort_by or {}).get(column)
            tds.append(_cell(text, raw.iloc[i][key] if raw is not None and key else None))
        cls = classes[i] if classes else ""
        rows.append((f'<tr class="{cls}">' if cls else "<tr>") + "".join(tds) + "</tr>")
    body = "\n".join(rows)
    attributes = "".join(f' {k}="{_e(v)}"' for k, v in (attrs or {}).items())
    return (
        f'<table class="results sortable"{attributes}>\n<thead><tr>{heads}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody>\n</table>\n"
    )


def _dev_sets(selections: Mapping[str, Mapping[str, Any]]) -> set[str]:
    return {str(s["eval_set"]) for s in selections.values() if s and s.get("eval_set")}


def eval_set_tables(
    df: pd.DataFrame, selections: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """The current results, one sortable table per eval set (dev sets first), the selected
    rows highlighted; under each eval set's name its scoring contracts and eval cuts."""
    current = df[df["current"] & (df["eval_set"] != NONE)]
    if current.empty:
        return "<p>No evaluation results.</p>\n"
    dev = _dev_sets(selections or {})
    columns = [c for c in RESULT_COLUMNS if compared(df) or c not in BASELINE_VIEW]
    columns = [c for c in columns if has_parents(df) or c not in PARENT_VIEW]
    out = []
    for eval_set in sorted(current["eval_set"].unique(), key=lambda s: (s not in dev, s)):
        rows = current[current["eval_set"] == eval_set].reset_index(drop=True)
        view = display_table(rows)[columns]
        role = "dev set: the runs select on it" if eval_set in dev else "test set"
        hashes = [
            f"{what} {', '.join(short(v) for v in sorted(rows[col].dropna().unique()))}"
            for what, col in (("contract", "contract_sha256"), ("eval cuts", "eval_cuts_sha256"))
            if rows[col].notna().any()
        ]
        out.append(
            f'<h3 id="set-{slug(eval_set)}">{_e(eval_set)} <span class="badge">{_e(role)}</span>'
            f"</h3>\n"
            f'<p class="set-meta">{_e("; ".join(hashes))}</p>\n'
            + sortable_table(
                view,
                rows,
                RESULT_COLUMNS,
                ["selected" if s else "" for s in rows["selected"]],
                {"data-table": "eval-set", "data-eval-set": eval_set},
            )
        )
    return "".join(out)


def archived_tables(df: pd.DataFrame) -> str:
    """Results of earlier data or model revisions, one table per eval set, collapsed."""
    archived = df[~df["current"]]
    if archived.empty:
        return ""
    out = [
        '<h2 id="archived">Earlier revisions (archived)</h2>\n<details>\n<summary>'
        f"{len(archived)} result(s) of models or eval data that are no longer current, kept by "
        "artifact hash</summary>\n"
    ]
    for eval_set in sorted(archived["eval_set"].unique()):
        rows = archived[archived["eval_set"] == eval_set].reset_index(drop=True)
        view = display_table(rows)[list(ARCHIVE_COLUMNS)]
        classes = ["archived"] * len(rows)
        out.append(
            f"<h3>{_e(eval_set)}</h3>\n"
            + sortable_table(view, rows, ARCHIVE_COLUMNS, classes, {"data-table": "archived"})
        )
    return "".join(out) + "</details>\n"


def figure_html(
    figure: PageFigure, label: str = "", wide: bool = False, caption: bool = True
) -> str:
    """``<figure>`` of a PNG inlined as a data URI, with its title (and ``label``) and, with
    ``caption``, what it shows."""
    title = f"{figure.title}: {label}" if label else figure.title
    words = f" {_e(figure.caption)}" if caption else ""
    return (
        f'<figure class="{"wide" if wide else "plot"}" data-kind="{_e(figure.kind)}">'
        f'<img src="{figure.data_uri()}" alt="{_e(title)}">'
        f"<figcaption><b>{_e(title)}.</b>{words}</figcaption></figure>\n"
    )


def _first(figure: PageFigure, explained: set[str]) -> bool:
    """Whether ``figure`` is the first of its kind (then its kind is in ``explained``)."""
    first = figure.kind not in explained
    explained.add(figure.kind)
    return first


def figures_html(cards: Sequence[RunCard], figures: Iterable[PageFigure]) -> str:
    """The forest plot, then each card's figures (a replicated run: its replicas'), in the
    order of the cards; what a kind of figure shows is said under its first one."""
    figures = list(figures)
    if not figures:
        return ""
    out = ['<h2 id="figures">Figures</h2>\n']
    out += [figure_html(f, wide=True) for f in figures if f.kind == DIFFERENCES]
    shown: set[int] = set()
    explained: set[str] = set()
    for card in cards:
        runs = [s.run for s in card.seeds] or [card.name]
        mine = [(i, f) for i, f in enumerate(figures) if f.run in runs and f.kind != DIFFERENCES]
        if not mine:
            continue
        shown.update(i for i, _ in mine)
        items = "".join(
            figure_html(f, f.run if card.seeds else "", caption=_first(f, explained))
            for _, f in mine
        )
        out.append(
            f'<h3 id="figures-{slug(card.name)}">{_e(card.name)}</h3>\n'
            f'<div class="figures">\n{items}</div>\n'
        )
    rest = [f for i, f in enumerate(figures) if i not in shown and f.kind != DIFFERENCES]
    if rest:
        items = "".join(figure_html(f, as_text(f.run)) for f in rest)
        out.append(f'<h3>Other runs</h3>\n<div class="figures">\n{items}</div>\n')
    return "".join(out)


def warnings_html(df: pd.DataFrame) -> str:
    """Results that must not be compared, rows made by changed code, dev sets of seen speakers
    only."""
    notes = check_contracts(df)
    out = ""
    if notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in notes)
        out += (
            f'<div class="warning"><b>Not all results are comparable.</b><ul>{items}</ul></div>\n'
        )
    out += "".join(f'<div class="warning">{_e(n)}</div>\n' for n in code_notes(df))
    out += "".join(f'<p class="warning">{_e(n)}</p>\n' for n in dev_notes(df))
    return out


def _lede(df: pd.DataFrame, cards: Sequence[RunCard]) -> str:
    current = df[df["current"]]
    sets = sorted(s for s in current["eval_set"].unique() if s != NONE)
    contracts = sorted(current["contract_sha256"].dropna().unique())
    failed = sum(c.failed for c in cards)
    parts = [f"{len(cards)} run(s)" + (f", {failed} failed" if failed else "")]
    parts.append(f"eval sets: {', '.join(sets)}" if sets else "no evaluations")
    baseline = next((c.name for c in cards if c.baseline), None)
    if baseline and len(cards) > 1:
        parts.append(f"baseline run: {baseline}")
    if len(contracts) == 1:
        parts.append(f"scoring contract {contracts[0][:12]}")
    return '<p class="lede">' + _e(" · ".join(parts)) + "</p>\n"


def _nav(sections: Sequence[tuple[str, str]]) -> str:
    links = "".join(f'<a href="#{_e(a)}">{_e(t)}</a>' for a, t in sections)
    return f"<nav>{links}</nav>\n"


def report_html(
    df: pd.DataFrame,
    replicas: pd.DataFrame | None = None,
    plans: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    selections: Mapping[str, Mapping[str, Any]] | None = None,
    figures: Iterable[PageFigure] = (),
) -> str:
    """The page (see the module docstring). ``replicas``: the seed replica table
    (:func:`asrflow.report.replicas.replica_table`); ``plans``: run -> its ``recipe: auto``
    plan; ``selections``: run -> its ``selected.json`` (the gate's decision); ``figures``: the
    PNGs to inline."""
    cards = run_cards(df, selections, replicas)
    figures = list(figures)
    show = compared(df)
    sections = [("runs", "Runs"), ("figures", "Figures"), ("results", "Results by eval set")]
    sections = [s for s in sections if s[0] != "figures" or figures]
    seeds = ""
    if replicas is not None and not replicas.empty:
        sections.append(("replicas", "Seed replicas"))
        seeds = (
            '<section id="replicas">\n<h2>Seed replicas</h2>\n'
            + sortable_table(replica_view(replicas), attrs={"data-table": "replicas"})
            + f'<p class="note">{_e(REPLICA_NOTE)}</p>\n</section>\n'
        )
    if plans:
        sections.append(("plans", "Derived recipes"))
    archived = archived_tables(df)
    if archived:
        sections.append(("archived", "Earlier revisions"))
    # one (replicated) run has no other to compare its card with
    cards_html = "".join(card_html(c, show and len(cards) > 1) for c in cards)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>Model comparison</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        f'<div class="top"><h1>Model comparison</h1>\n{_lede(df, cards)}</div>\n'
        f"{_nav(sections)}{warnings_html(df)}"
        f'<section id="runs" class="cards" aria-label="Runs">\n'
        f"{cards_html or '<p>No runs.</p>'}</section>\n"
        f"{figures_html(cards, figures)}"
        f'<h2 id="results">Results by eval set</h2>\n{eval_set_tables(df, selections)}'
        f'<p class="note">{_e(INTERVAL_NOTE)}</p>\n'
        + (f'<p class="note">{_e(BASELINE_NOTE)}</p>\n' if show else "")
        + (f'<p class="note">{_e(PARENT_NOTE)}</p>\n' if has_parents(df) else "")
        + seeds
        + (f'<section id="plans">\n{plans_html(plans)}</section>\n' if plans else "")
        + archived
        + f"</main>\n<script>{SORT_JS}</script>\n</body>\n</html>\n"
    )
