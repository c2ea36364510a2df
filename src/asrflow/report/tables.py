"""The comparison table written out: the CSV (every column, full hashes), and Markdown and one
HTML page for people (percentages with their 95 % intervals in brackets, short hashes, selected,
failed and archived rows marked, a warning when results are not comparable, a note for each run
whose dev set measures seen speakers only).

Example::

    write_report_tables(comparison_table(train, evals, selections), "report/comparison.csv",
                        "report/comparison.md", "report/comparison.html")
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from asrflow.evaluate.intervals import BOOTSTRAP
from asrflow.io import write_text
from asrflow.report.comparison import NONE, SHORT, check_contracts
from asrflow.report.plans import plans_html, plans_markdown
from asrflow.types import Pathlike


def _with_interval(value: Any, low: Any, high: Any, sign: str = "") -> str:
    """A rate in percent with its interval: ``12.20 [10.10, 14.50]`` (``sign="+"``: signed)."""
    if _missing(value):
        return ""
    text = f"{100 * float(value):{sign}.2f}"
    if _missing(low) or _missing(high):
        return text
    return f"{text} [{100 * float(low):{sign}.2f}, {100 * float(high):{sign}.2f}]"


def _rate_cells(df: pd.DataFrame, name: str, sign: str = "") -> list[str]:
    """``name`` (``wer``, ``cer``, ``wer_diff_vs_selected``) of each row with its interval."""
    return [
        _with_interval(v, lo, hi, sign)
        for v, lo, hi in zip(df[name], df[f"{name}_ci_low"], df[f"{name}_ci_high"], strict=True)
    ]


INTERVAL_NOTE = (
    "WER and CER pool errors over all utterances. In brackets: the "
    f"{100 * BOOTSTRAP.level:g} % interval, a bootstrap over utterances "
    f"({BOOTSTRAP.resamples} resamples, seed {BOOTSTRAP.seed}). "
    "WER diff vs selected: this row's WER minus that of its run's selected artifact on the "
    "same eval set, in points, with the paired interval (utterances matched by ID); an interval "
    "that excludes 0 is a difference at that level. The selected row's own is 0 [0, 0]. "
    "Scored: utterances scored of the eval set (all of it, unless evaluation.filter excluded "
    "some: such a WER is marked (partial) and is ranked and compared only with results on the "
    "same utterances)."
)
"""What the bracketed figures of the Markdown and HTML tables mean."""

CONFOUNDED = "[confounded]"
"""Marks a run that differs from the baseline run in more than one way."""

BASELINE_NOTE = (
    "WER diff vs baseline: a run's selected artifact against the baseline run's selected "
    "artifact on the same eval set (paired by utterance, as above). Changed vs baseline: what "
    "differs from the baseline run (data, tokenizer, recipe keys old -> new, start weights, "
    f"effective batch, update budget, code, packages); {CONFOUNDED}: more than one of these, "
    "so a WER difference cannot be put down to one of them."
)
"""What the run-against-baseline columns of the Markdown and HTML tables mean."""

REPLICA_NOTE = (
    "Seed replicas (runs.<run>.seeds): one row per replicated run and eval set, over the artifact "
    "each replica selected on dev. Mean WER with the 95 % interval of the mean, a bootstrap over "
    "utterances and seeds; sd: the standard deviation of the replicas' WERs, in points; WER diff "
    "vs baseline: the mean minus the baseline run's (the mean of its replicas, if it has them), "
    "paired by utterance. A difference within the seed spread is not a finding."
)
"""What the seed replica table of the Markdown and HTML reports means."""


def _num(value: Any, digits: int = 3) -> str:
    return "" if _missing(value) else f"{float(value):.{digits}f}"


def _points(value: Any) -> str:
    """A fraction in percent (points), two decimals."""
    return "" if _missing(value) else f"{100 * float(value):.2f}"


def _short(value: Any) -> str:
    return "" if _missing(value) else str(value)[:SHORT]


def _text(value: Any) -> str:
    return "" if _missing(value) else str(value)


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The readable subset of :func:`comparison_table`: percentages, short hashes, text cells."""
    out = pd.DataFrame(
        {
            "run": df["run"].map(_text),
            "artifact": df["artifact"].map(_text),
            "eval set": df["eval_set"].map(_text),
            "WER %": [
                f"{cell} (partial)" if cell and _partial(n) else cell
                for cell, n in zip(_rate_cells(df, "wer"), df["utterances_excluded"], strict=True)
            ],
            "CER %": _rate_cells(df, "cer"),
            "WER diff vs selected": _rate_cells(df, "wer_diff_vs_selected", "+"),
            "WER diff vs baseline": _rate_cells(df, "wer_diff_vs_baseline", "+"),
            "changed vs baseline": [_change(r) for r in df.itertuples()],
            "scored": [_scored(r) for r in df.itertuples()],
            "rank": df["rank"].map(_text),
            "selected": df["selected"].map(lambda s: "yes" if s else ""),
            "status": df["status"].map(_text),
            "current": df["current"].map(lambda c: "" if c else "archived"),
            "RTF": df["rtf"].map(_num),
            "decoding": df["decoding"].map(_text),
            "artifact sha": df["artifact_sha256"].map(_short),
            "data sha": df["data_sha256"].map(_short),
            "tokenizer sha": df["tokenizer_sha256"].map(_short),
            "contract sha": df["contract_sha256"].map(_short),
            "recipe sha": df["recipe_sha256"].map(_short),
            "budget": df["update_budget"].map(_text),
            "notes": [_notes(r) for r in df.itertuples()],
        }
    )
    return out.reset_index(drop=True)


def replica_view(table: pd.DataFrame) -> pd.DataFrame:
    """The readable form of :func:`asrflow.report.replicas.replica_table`."""
    return pd.DataFrame(
        {
            "run": table["run"].map(_text),
            "eval set": table["eval_set"].map(_text),
            "replicas": table["replicas"].map(_text),
            "seeds": table["seeds"].map(_text),
            "mean WER %": _rate_cells(table, "wer_mean"),
            "sd": table["wer_sd"].map(_points),
            "min - max": [
                f"{_points(a)} - {_points(b)}"
                for a, b in zip(table["wer_min"], table["wer_max"], strict=True)
            ],
            "WER diff vs baseline": _rate_cells(table, "wer_diff_vs_baseline", "+"),
            "baseline": table["baseline_run"].map(_text),
            "selected": table["selected"].map(_text),
            "missing": table["missing"].map(_text),
        }
    ).reset_index(drop=True)


BASELINE_CELL = "(baseline run)"
"""The change cell of the baseline run's own rows (not to be read as a fine-tuning run's
``baseline`` artifact, its start weights)."""

BASELINE_VIEW = ["WER diff vs baseline", "changed vs baseline"]
"""Columns of :func:`display_table` shown only where there is another run to compare with."""


def _compared(df: pd.DataFrame) -> bool:
    """More than one current run: the baseline columns say something."""
    return df.loc[df["current"], "run"].nunique() > 1


def _change(row: Any) -> str:
    """What differs from the baseline run, :data:`CONFOUNDED` first where it is more than one
    thing; :data:`BASELINE_CELL` on the baseline run's rows, empty without a baseline."""
    if _missing(row.baseline_run):
        return ""
    if row.run == row.baseline_run:
        return BASELINE_CELL
    text = _text(row.changed_vs_baseline)
    return f"{CONFOUNDED} {text}" if not _missing(row.confounded) and row.confounded else text


def _partial(excluded: Any) -> bool:
    return not _missing(excluded) and int(excluded) > 0


def _scored(row: Any) -> str:
    """``"137/137"`` utterances scored of the eval set; with what ``evaluation.filter``
    excluded (and its seconds) on a partial set; empty for summaries made before it was
    recorded."""
    if _missing(row.utterances_scored) or _missing(row.utterances_total):
        return ""
    text = f"{row.utterances_scored}/{row.utterances_total}"
    if _partial(row.utterances_excluded):
        seconds = "" if _missing(row.seconds_excluded) else f", {row.seconds_excluded:.1f} s"
        text += f" (excluded: {_text(row.excluded_by_reason)}{seconds})"
    return text


def _notes(row: Any) -> str:
    notes = []
    if row.selected and not _missing(row.dev_measures):
        notes.append(f"chosen on a dev set of {row.dev_measures}")
    if not _missing(row.not_compared):
        notes.append(row.not_compared)
    if not _missing(row.decoded_by):
        notes.append(f"same weights as {row.decoded_by}: decoded once")
    if not _missing(row.code_changed):
        notes.append(f"code changed since: {row.code_changed}")
    return "; ".join(notes)


def _vs_baseline(row: Any) -> str:
    """`` (vs baseline r1: recipe: optim.lr ...)`` for a run listed outside the results table."""
    change = _change(row)
    if not change or change == BASELINE_CELL:
        return ""
    return f" (vs baseline {row.baseline_run}: {_md_cell(change)})"


def code_notes(df: pd.DataFrame) -> list[str]:
    """A warning when current rows were made by asrflow code that has changed since."""
    changed = df[df["current"] & df["code_changed"].map(lambda v: not _missing(v))]
    if changed.empty:
        return []
    return [
        f"{len(changed)} current row(s) were made by code that has changed since (see their "
        "notes; `asrflow status` lists every artifact): force a rerun of their rules to refresh"
    ]


def dev_notes(df: pd.DataFrame) -> list[str]:
    """One line per run whose dev set measures seen speakers only (its selection's message)."""
    runs = df[df["current"] & df["dev_note"].map(lambda v: not _missing(v))]
    return [f"Run {r.run}: {r.dev_note}." for r in runs.drop_duplicates("run").itertuples()]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub pipe table of string cells (no ``tabulate`` needed)."""
    header = "| " + " | ".join(_md_cell(str(c)) for c in table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = [
        "| " + " | ".join(_md_cell(_text(v)) for v in row) + " |"
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
        if not _compared(df):
            view = view.drop(columns=BASELINE_VIEW)
        lines += [markdown_table(view), ""]
        lines += [f"> {_md_cell(n)}\n" for n in dev_notes(df)]
        lines += [INTERVAL_NOTE, ""]
        lines += [BASELINE_NOTE, ""] if _compared(df) else []
    if replicas is not None and not replicas.empty:
        lines += ["## Seed replicas", "", markdown_table(replica_view(replicas)), ""]
        lines += [REPLICA_NOTE, ""]
    failed = df[df["status"] == "failed"].drop_duplicates("run")
    if not failed.empty:
        lines += ["## Failed runs", ""]
        lines += [
            f"- **{r.run}**: {_md_cell(_text(r.error)) or 'no error message recorded'}"
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
            f"- {r.run} (status {_text(r.status)}){_vs_baseline(r)}" for r in pending.itertuples()
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


_CSS = """
body { font-family: sans-serif; margin: 1.5em; }
table.asrflow { border-collapse: collapse; font-size: 0.9em; }
table.asrflow th, table.asrflow td { border: 1px solid #ccc; padding: 3px 8px; }
table.asrflow th { background: #f0f0f0; }
table.asrflow tr.selected td { background: #e3f4e1; font-weight: bold; }
table.asrflow tr.failed td { background: #fbe4e4; }
table.asrflow tr.archived td { color: #777; }
.warning { background: #fff4ce; border: 1px solid #e0c060; padding: 0.5em 1em; }
"""


def report_html(
    df: pd.DataFrame,
    replicas: pd.DataFrame | None = None,
    plans: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The comparison as one HTML page; selected rows highlighted, failed and archived marked;
    then the seed replicas (``replicas``), if any, and the runs' plans (``plans``)."""
    view = display_table(df)
    if not _compared(df):
        view = view.drop(columns=BASELINE_VIEW)
    view["error"] = df["error"].map(_text).reset_index(drop=True)
    table = view.to_html(index=False, classes="asrflow", border=0, escape=True, na_rep="")
    head, sep, body = table.partition("<tbody>")
    parts = body.split("<tr>")
    classes = []
    for r in df.itertuples(index=False):
        cls = []
        if r.selected:
            cls.append("selected")
        if r.status == "failed":
            cls.append("failed")
        if not r.current:
            cls.append("archived")
        classes.append(" ".join(cls))
    if len(parts) - 1 != len(classes):  # pragma: no cover - pandas changed its markup
        raise RuntimeError("unexpected pandas to_html markup; cannot mark rows")
    body = parts[0] + "".join(
        (f'<tr class="{c}">' if c else "<tr>") + p for c, p in zip(classes, parts[1:], strict=True)
    )
    notes = check_contracts(df)
    contracts = sorted(df.loc[df["current"], "contract_sha256"].dropna().unique())
    if notes:
        intro = '<div class="warning"><b>Not all results are comparable.</b><ul>' + "".join(
            f"<li>{html.escape(n)}</li>" for n in notes
        )
        intro += "</ul></div>"
    elif contracts:
        intro = f"<p>Scoring contract: <code>{html.escape(contracts[0])}</code></p>"
    else:
        intro = ""
    intro += "".join(f'<div class="warning">{html.escape(n)}</div>' for n in code_notes(df))
    baseline_note = f"<p>{html.escape(BASELINE_NOTE)}</p>\n" if _compared(df) else ""
    dev = "".join(f'<p class="warning">{html.escape(n)}</p>\n' for n in dev_notes(df))
    seeds = ""
    if replicas is not None and not replicas.empty:
        seeds = replica_view(replicas).to_html(index=False, classes="asrflow", border=0, na_rep="")
        seeds = f"<h2>Seed replicas</h2>\n{seeds}\n<p>{html.escape(REPLICA_NOTE)}</p>\n"
    seeds += plans_html(plans or {})
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>Model comparison</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>Model comparison</h1>\n{intro}\n{head}{sep}{body}\n{dev}"
        f"<p>{html.escape(INTERVAL_NOTE)}</p>\n{baseline_note}{seeds}</body>\n</html>\n"
    )


def write_report_tables(
    df: pd.DataFrame,
    csv_path: Pathlike,
    md_path: Pathlike,
    html_path: Pathlike,
    replicas: pd.DataFrame | None = None,
    plans: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Atomically write the table as CSV (every column, full hashes), Markdown and HTML (with
    the seed replica table ``replicas`` and the runs' ``plans``, if any)."""
    write_text(csv_path, df.to_csv(index=False, lineterminator="\n"))
    write_text(md_path, report_markdown(df, replicas, plans))
    write_text(html_path, report_html(df, replicas, plans))
