"""A run's summary card (:class:`asrflow.report.cards.RunCard`) as HTML, for the report page
(:mod:`asrflow.report.page`). Every text from the data is escaped.

Example::

    card_html(card, compared=True)   # '<article class="card baseline" id="run-r1" ...'
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from asrflow.report.cards import (
    BETTER,
    KEPT,
    NO_AVERAGE,
    WORSE,
    Details,
    Gate,
    Result,
    RunCard,
    Seed,
)

_VERDICT_CLASS = {BETTER: "good", WORSE: "bad"}
_DECISION_CLASS = {KEPT: "good", NO_AVERAGE: ""}


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def slug(name: str) -> str:
    """An HTML id fragment of ``name``: ``"r1/x y"`` -> ``"r1-x-y"``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "x"


def badge(text: str, css: str = "") -> str:
    """A small label (``css``: ``good``, ``bad``, ``warn``, ``base`` or none)."""
    return (
        f'<span class="badge {css}">{_e(text)}</span>'
        if css
        else f'<span class="badge">{_e(text)}</span>'
    )


def _line(label: str, body: str, css: str = "line") -> str:
    return f'<p class="{css}"><span class="label">{_e(label)}</span> {body}</p>\n'


def results_table(results: tuple[Result, ...], compared: bool) -> str:
    """The card's WER per eval set (dev first), with its difference to the baseline run where
    there is another run (``compared``)."""
    if not results:
        return ""
    heads = "<th>eval set</th><th>WER % [95 % CI]</th>"
    heads += "<th>vs baseline</th>" if compared else ""
    rows = []
    for r in results:
        role = f" {badge(r.role)}" if r.role else ""
        wer = _e(r.wer) + (f'<br><span class="note">{_e(r.spread)}</span>' if r.spread else "")
        cells = f'<td>{_e(r.eval_set)}{role}</td><td class="wer">{wer}</td>'
        if compared:
            verdict = (
                f"<br>{badge(r.verdict, _VERDICT_CLASS.get(r.verdict, ''))}" if r.verdict else ""
            )
            cells += f"<td>{_e(r.vs_baseline)}{verdict}</td>"
        rows.append(f'<tr data-eval-set="{_e(r.eval_set)}">{cells}</tr>')
    return f"<table><thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>\n"


def gate_html(gate: Gate | None) -> str:
    """The selection gate's decision and its significance, with the reason in words."""
    if gate is None:
        return ""
    badges = badge(gate.decision, _DECISION_CLASS.get(gate.decision, "warn"))
    if gate.significant is not None:
        badges += " " + badge(
            "significant" if gate.significant else "not significant",
            "good" if gate.significant else "",
        )
    if gate.required:
        badges += " " + badge("significance required")
    sig = f'<br><span class="note">{_e(gate.significance)}</span>' if gate.significance else ""
    return (
        f'<div class="gate" data-decision="{_e(gate.decision)}">'
        + _line("Gate", f'{badges}<br><span class="note">{_e(gate.reason)}</span>{sig}')
        + "</div>\n"
    )


def seeds_table(seeds: tuple[Seed, ...]) -> str:
    """A line per replica of a replicated run: its seed, selected artifact (or why it failed)
    and WER per eval set."""
    if not seeds:
        return ""
    rows = []
    for s in seeds:
        if s.status == "failed":
            pick = badge("failed", "bad") + f' <span class="error">{_e(s.error)}</span>'
        else:
            pick = f"<code>{_e(s.selected or '-')}</code>"
            pick += f" {badge(s.decision)}" if s.decision else ""
        wers = "<br>".join(f"{_e(e)}: {_e(w)}" for e, w in s.wers)
        rows.append(
            f'<tr class="seed" data-run="{_e(s.run)}"><td>{_e(s.seed)}</td><td>{pick}</td>'
            f"<td>{wers}</td></tr>"
        )
    return (
        '<table class="seeds"><thead><tr><th>seed</th><th>selected</th><th>WER %</th></tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table>\n"
    )


def details_html(sections: tuple[tuple[str, Details], ...]) -> str:
    """The run's decoding settings and hashes (one section per replica), collapsed."""
    if not any(items for _, items in sections):
        return ""
    body = ""
    for title, items in sections:
        if len(sections) > 1:
            body += f"<b>{_e(title)}</b>"
        body += '<dl class="settings">' + "".join(
            f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items
        )
        body += "</dl>"
    return f'<details class="settings"><summary>Settings and hashes</summary>{body}</details>\n'


def card_html(card: RunCard, compared: bool) -> str:
    """The card of a run; ``compared``: there is another run (the columns against the
    baseline run say something)."""
    css = " ".join(
        ["card", *(["baseline"] if card.baseline else []), *(["failed"] if card.failed else [])]
    )
    badges = []
    if card.baseline and compared:
        badges.append(badge("baseline", "base"))
    if card.seeds:
        badges.append(badge(f"{len(card.seeds)} seeds"))
    if card.status != "completed":
        badges.append(badge(card.status, "bad" if "failed" in card.status else "warn"))
    if card.confounded:
        badges.append(badge("confounded", "warn"))
    out = (
        f'<article class="{css}" id="run-{slug(card.name)}" data-run="{_e(card.name)}">\n'
        f"<header><h3>{_e(card.name)}</h3>{' '.join(badges)}</header>\n"
    )
    if card.selected:
        sha = f' <span class="hash" title="artifact sha256">{_e(card.selected_sha)}</span>'
        out += _line(
            "Selected",
            f"<code>{_e(card.selected)}</code>{sha if card.selected_sha else ''}",
            "pick",
        )
    if card.error:
        out += _line("Failed:", f'<span class="error">{_e(card.error)}</span>')
    out += results_table(card.results, compared)
    out += gate_html(card.gate)
    out += seeds_table(card.seeds)
    if card.change and compared:
        out += _line("Changed vs baseline", _e(card.change))
    out += "".join(f'<p class="line note">{_e(n)}</p>\n' for n in card.notes)
    out += details_html(card.details)
    return out + "</article>\n"
