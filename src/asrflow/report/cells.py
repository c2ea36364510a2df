"""The comparison's cells as people read them: rates in percent with their 95 % intervals in
brackets, short hashes, what changed against the baseline run, notes, and the paragraphs that
explain them. Shared by the Markdown tables (:mod:`asrflow.report.tables`) and the HTML page
(:mod:`asrflow.report.page`).

Example::

    with_interval(0.122, 0.101, 0.145)   # "12.20 [10.10, 14.50]"
    display_table(comparison_table(train, evals, selections))
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from asrflow.evaluate.intervals import BOOTSTRAP
from asrflow.report.comparison import SHORT


def with_interval(value: Any, low: Any, high: Any, sign: str = "") -> str:
    """A rate in percent with its interval: ``12.20 [10.10, 14.50]`` (``sign="+"``: signed)."""
    if missing(value):
        return ""
    text = f"{100 * float(value):{sign}.2f}"
    if missing(low) or missing(high):
        return text
    return f"{text} [{100 * float(low):{sign}.2f}, {100 * float(high):{sign}.2f}]"


def rate_cells(df: pd.DataFrame, name: str, sign: str = "") -> list[str]:
    """``name`` (``wer``, ``cer``, ``wer_diff_vs_selected``) of each row with its interval."""
    return [
        with_interval(v, lo, hi, sign)
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


def num(value: Any, digits: int = 3) -> str:
    return "" if missing(value) else f"{float(value):.{digits}f}"


def points(value: Any) -> str:
    """A fraction in percent (points), two decimals."""
    return "" if missing(value) else f"{100 * float(value):.2f}"


def short(value: Any) -> str:
    return "" if missing(value) else str(value)[:SHORT]


def as_text(value: Any) -> str:
    return "" if missing(value) else str(value)


def missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The readable subset of :func:`comparison_table`: percentages, short hashes, text cells."""
    out = pd.DataFrame(
        {
            "run": df["run"].map(as_text),
            "artifact": df["artifact"].map(as_text),
            "eval set": df["eval_set"].map(as_text),
            "WER %": [
                f"{cell} (partial)" if cell and partial(n) else cell
                for cell, n in zip(rate_cells(df, "wer"), df["utterances_excluded"], strict=True)
            ],
            "CER %": rate_cells(df, "cer"),
            "WER diff vs selected": rate_cells(df, "wer_diff_vs_selected", "+"),
            "WER diff vs baseline": rate_cells(df, "wer_diff_vs_baseline", "+"),
            "changed vs baseline": [change_text(r) for r in df.itertuples()],
            "WER diff vs parent": rate_cells(df, "wer_diff_vs_parent", "+"),
            "parent": df["parent_run"].map(as_text),
            "scored": [scored_text(r) for r in df.itertuples()],
            "rank": df["rank"].map(as_text),
            "selected": df["selected"].map(lambda s: "yes" if s else ""),
            "status": df["status"].map(as_text),
            "current": df["current"].map(lambda c: "" if c else "archived"),
            "RTF": df["rtf"].map(num),
            "decoding": df["decoding"].map(as_text),
            "artifact sha": df["artifact_sha256"].map(short),
            "data sha": df["data_sha256"].map(short),
            "tokenizer sha": df["tokenizer_sha256"].map(short),
            "contract sha": df["contract_sha256"].map(short),
            "recipe sha": df["recipe_sha256"].map(short),
            "budget": df["update_budget"].map(as_text),
            "notes": [notes_text(r) for r in df.itertuples()],
        }
    )
    return out.reset_index(drop=True)


def replica_view(table: pd.DataFrame) -> pd.DataFrame:
    """The readable form of :func:`asrflow.report.replicas.replica_table`."""
    return pd.DataFrame(
        {
            "run": table["run"].map(as_text),
            "eval set": table["eval_set"].map(as_text),
            "replicas": table["replicas"].map(as_text),
            "seeds": table["seeds"].map(as_text),
            "mean WER %": rate_cells(table, "wer_mean"),
            "sd": table["wer_sd"].map(points),
            "min - max": [
                f"{points(a)} - {points(b)}"
                for a, b in zip(table["wer_min"], table["wer_max"], strict=True)
            ],
            "WER diff vs baseline": rate_cells(table, "wer_diff_vs_baseline", "+"),
            "baseline": table["baseline_run"].map(as_text),
            "selected": table["selected"].map(as_text),
            "missing": table["missing"].map(as_text),
        }
    ).reset_index(drop=True)


BASELINE_CELL = "(baseline run)"
"""The change cell of the baseline run's own rows (not to be read as a fine-tuning run's
``baseline`` artifact, its start weights)."""

BASELINE_VIEW = ["WER diff vs baseline", "changed vs baseline"]
"""Columns of :func:`display_table` shown only where there is another run to compare with."""


PARENT_VIEW = ["WER diff vs parent", "parent"]
"""Columns of :func:`display_table` shown only where a run fine-tuned another run's model."""

PARENT_NOTE = (
    "WER diff vs parent: a fine-tuning run's selected artifact against the selected artifact of "
    "the run it started from (init: {run: ...}) on the same eval set, paired by utterance: what "
    "the fine-tuning gained over the model it started from."
)
"""What the run-against-parent columns of the Markdown and HTML tables mean."""


def has_parents(df: pd.DataFrame) -> bool:
    """Some current run fine-tuned another run's selected model: the parent columns say
    something."""
    return bool(df.loc[df["current"], "parent_run"].notna().any())


def compared(df: pd.DataFrame) -> bool:
    """More than one current run: the baseline columns say something."""
    return df.loc[df["current"], "run"].nunique() > 1


def change_text(row: Any) -> str:
    """What differs from the baseline run, :data:`CONFOUNDED` first where it is more than one
    thing; :data:`BASELINE_CELL` on the baseline run's rows, empty without a baseline."""
    if missing(row.baseline_run):
        return ""
    if row.run == row.baseline_run:
        return BASELINE_CELL
    text = as_text(row.changed_vs_baseline)
    return f"{CONFOUNDED} {text}" if not missing(row.confounded) and row.confounded else text


def partial(excluded: Any) -> bool:
    return not missing(excluded) and int(excluded) > 0


def scored_text(row: Any) -> str:
    """``"137/137"`` utterances scored of the eval set; with what ``evaluation.filter``
    excluded (and its seconds) on a partial set; empty for summaries made before it was
    recorded."""
    if missing(row.utterances_scored) or missing(row.utterances_total):
        return ""
    text = f"{row.utterances_scored}/{row.utterances_total}"
    if partial(row.utterances_excluded):
        seconds = "" if missing(row.seconds_excluded) else f", {row.seconds_excluded:.1f} s"
        text += f" (excluded: {as_text(row.excluded_by_reason)}{seconds})"
    return text


def notes_text(row: Any) -> str:
    notes = []
    if row.selected and not missing(row.dev_measures):
        notes.append(f"chosen on a dev set of {row.dev_measures}")
    if not missing(row.not_compared):
        notes.append(row.not_compared)
    if not missing(row.decoded_by):
        notes.append(f"same weights as {row.decoded_by}: decoded once")
    if not missing(row.code_changed):
        notes.append(f"code changed since: {row.code_changed}")
    return "; ".join(notes)


def code_notes(df: pd.DataFrame) -> list[str]:
    """A warning when current rows were made by asrflow code that has changed since."""
    changed = df[df["current"] & df["code_changed"].map(lambda v: not missing(v))]
    if changed.empty:
        return []
    return [
        f"{len(changed)} current row(s) were made by code that has changed since (see their "
        "notes; `asrflow status` lists every artifact): force a rerun of their rules to refresh"
    ]


def dev_notes(df: pd.DataFrame) -> list[str]:
    """One line per run whose dev set measures seen speakers only (its selection's message)."""
    runs = df[df["current"] & df["dev_note"].map(lambda v: not missing(v))]
    return [f"Run {r.run}: {r.dev_note}." for r in runs.drop_duplicates("run").itertuples()]
