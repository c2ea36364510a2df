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
    WORSE,
    Details,
    Gate,
    Result,
    RunCard,
    Seed,
)

_VERDICT_CLASS = {BETTER: "good", WORSE: "bad"}
_DECISION_CLASS = {KEPT: "good"}


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def breakable(name: str) -> str:
    """``name`` escaped, with a line break allowed after each dot (artifact names such as
    ``valid.loss.ave_3best`` wrap between their parts, not inside them)."""
    return _e(name).replace(".", ".<wbr>")


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


def figure_cell(text: str, note: str = "") -> str:
    """A rate with its interval on two lines: ``"12.20 [10.10, 14.50]"`` as the figure, then
    the interval (and ``note``) small."""
    point, _, interval = text.partition(" [")
    lines = [f'<span class="fig">{_e(point)}</span>']
    lines += [f'<span class="ci">[{_e(interval)}</span>'] if interval else []
    lines += [f'<span class="ci">{_e(note)}</span>'] if note else []
    return "<br>".join(lines)


def results_table(
    results: tuple[Result, ...], compared: bool, baseline: bool = False, parent: str = ""
) -> str:
    """The card's WER per eval set (dev first), with its difference to the baseline run where
    there is another run (``compared``; ``baseline``: the card is the baseline run's) and to
    the ``parent`` run of a fine-tuning run."""
    if not results:
        return ""
    heads = "<th>eval set</th><th>WER % (95 % CI)</th>"
    heads += "<th>vs baseline</th>" if compared else ""
    heads += f"<th>vs parent {_e(parent)}</th>" if parent else ""
    rows = []
    for r in results:
        role = f"<br>{badge(r.role)}" if r.role else ""
        cells = f'<td class="set">{_e(r.eval_set)}{role}</td>'
        cells += f'<td class="wer">{figure_cell(r.wer, r.note)}</td>'
        if compared and baseline:
            cells += '<td class="vs"><span class="ci">the baseline</span></td>'
        elif compared:
            verdict = badge(r.verdict, _VERDICT_CLASS.get(r.verdict, "")) if r.verdict else ""
            cells += f'<td class="vs">{figure_cell(r.vs_baseline)}'
            cells += f"<br>{verdict}</td>" if verdict else "</td>"
        if parent:
            cells += f'<td class="vs">{figure_cell(r.vs_parent)}</td>'
        rows.append(f'<tr data-eval-set="{_e(r.eval_set)}">{cells}</tr>')
    return f"<table><thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>\n"


def gate_html(gate: Gate | None) -> str:
    """The selection gate's decision and its significance where it was computed (else the
    reason in words); the whole reason as the line's tooltip."""
    if gate is None:
        return ""
    badges = badge(gate.decision, _DECISION_CLASS.get(gate.decision, ""))
    if gate.significant is not None:
        badges += " " + badge(
            "significant" if gate.significant else "not significant",
            "good" if gate.significant else "",
        )
    if gate.required:
        badges += " " + badge("significance required")
    words = gate.significance or gate.reason
    return (
        f'<div class="gate" data-decision="{_e(gate.decision)}" title="{_e(gate.reason)}">'
        + _line("Gate", f'{badges}<br><span class="note">{_e(words)}</span>')
        + "</div>\n"
    )


def seeds_table(seeds: tuple[Seed, ...], roles: dict[str, str] | None = None) -> str:
    """A line per replica of a replicated run: its seed, selected artifact and the gate's
    decision (or why it failed) and its WER % per eval set (headed by its role, ``roles``:
    eval set -> ``dev``/``test``, where known)."""
    if not seeds:
        return ""
    sets = list(dict.fromkeys(e for s in seeds for e, _ in s.wers))
    rows = []
    for s in seeds:
        wers = dict(s.wers)
        if s.status == "failed":
            pick = badge("failed", "bad") + f' <span class="error">{_e(s.error)}</span>'
            cells = f'<td colspan="{1 + len(sets)}">{pick}</td>'
        else:
            pick = f"<code>{breakable(s.selected or '-')}</code>"
            pick += f"<br>{badge(s.decision)}" if s.decision else ""
            cells = f"<td>{pick}</td>" + "".join(
                f'<td class="num">{_e(wers.get(e, ""))}</td>' for e in sets
            )
        rows.append(f'<tr class="seed" data-run="{_e(s.run)}"><td>{_e(s.seed)}</td>{cells}</tr>')
    roles = roles or {}
    heads = "".join(f'<th title="{_e(e)}">{_e(roles.get(e) or e)} WER</th>' for e in sets)
    return (
        '<table class="seeds"><thead><tr><th>seed</th><th>selected</th>'
        f"{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>\n"
    )


def _setting(label: str, value: str) -> str:
    """One line of the settings list; hashes in monospace."""
    css = ' class="hash"' if "sha256" in label else ""
    return f"<dt>{_e(label)}</dt><dd{css}>{_e(value)}</dd>"


def details_html(sections: tuple[tuple[str, Details], ...]) -> str:
    """The run's decoding settings and hashes (one section per replica), collapsed."""
    if not any(items for _, items in sections):
        return ""
    body = ""
    for title, items in sections:
        if len(sections) > 1:
            body += f"<b>{_e(title)}</b>"
        body += '<dl class="settings">' + "".join(_setting(k, v) for k, v in items)
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
    out += results_table(card.results, compared, card.baseline, card.parent)
    out += gate_html(card.gate)
    out += seeds_table(card.seeds, {r.eval_set: r.role for r in card.results})
    if card.change and compared:
        out += _line("Changed vs baseline", _e(card.change))
    out += "".join(f'<p class="line note">{_e(n)}</p>\n' for n in card.notes)
    out += details_html(card.details)
    return out + "</article>\n"
