"""How each ``recipe: auto`` run's values were derived, as the report shows it: a compact
column of the values (CSV) and every value with its reason (Markdown, HTML)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

PLAN_NOTE = (
    "Each value a run's plan derived from its train split, with the reason; a key of the run's "
    "overrides wins over the rule (asrflow plan RUN prints the same before training)."
)


def plan_text(plan: Mapping[str, Any] | None) -> str | None:
    """The values a run's plan (``recipe: auto``) gave its recipe, compactly:
    ``"frontend_conf.fs=8000 specaug=specaug ..."`` (overridden ones left out; reasons in the
    report's Markdown and HTML, and in the train summary)."""
    if not plan:
        return None
    return " ".join(
        f"{c['key']}={_plain(c['value'])}"
        for c in plan.get("choices", [])
        if not (c.get("overridden_by") or c.get("from_package"))
        and not isinstance(c["value"], Mapping)
    )


def plan_lines(plans: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown of each run's plan (``recipe: auto``): every derived value with its reason."""
    lines: list[str] = []
    for run, plan in plans.items():
        lines += [f"**{run}**", ""]
        for c in plan.get("choices", []):
            value = _md(_plain(c["value"]))
            if c.get("overridden_by"):
                lines.append(
                    f"- `{c['key']}`: overridden (`runs.{run}.overrides.{c['overridden_by']}`); "
                    f"the rule's {value}: {_md(c['reason'])}"
                )
            elif c.get("from_package"):
                lines.append(
                    f"- `{c['key']}`: the starting package's (`runs.{run}.init.model`); "
                    f"the rule's {value}: {_md(c['reason'])}"
                )
            else:
                lines.append(f"- `{c['key']}` = {value}: {_md(c['reason'])}")
        lines.append("")
    return lines


def _plain(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_plain, value)) + "]"
    return "null" if value is None else str(value)


def plans_markdown(plans: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The report's Markdown section of the runs' plans."""
    return ["## Derived recipes (recipe: auto)", "", PLAN_NOTE, "", *plan_lines(plans)]


def plans_html(plans: Mapping[str, Mapping[str, Any]]) -> str:
    """The report's HTML section of the runs' plans (one expandable list per run)."""
    if not plans:
        return ""
    out = f"<h2>Derived recipes (recipe: auto)</h2>\n<p>{html.escape(PLAN_NOTE)}</p>\n"
    for run, plan in plans.items():
        items = "".join(
            f"<li><code>{html.escape(c['key'])}</code> = {html.escape(_plain(c['value']))}"
            + (" (overridden)" if c.get("overridden_by") or c.get("from_package") else "")
            + f": {html.escape(c['reason'])}</li>"
            for c in plan.get("choices", [])
        )
        out += f"<details><summary>{html.escape(run)}</summary><ul>{items}</ul></details>\n"
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
