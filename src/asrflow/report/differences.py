"""Each artifact's WER against its run's selected artifact on the same eval set, with the paired
95 % interval of the difference (:func:`asrflow.evaluate.intervals.difference_interval`).

The columns :data:`DIFF_COLUMNS` of :func:`asrflow.report.comparison.comparison_table`, as
fractions like ``wer`` (this row's WER minus the selected artifact's; negative: fewer errors).
Both evaluations' utterances are paired by ID from their ``utterances.csv``
(:mod:`asrflow.evaluate.paired`). A difference is given only between current rows of one run and
eval set that were scored under the same scoring contract on the same eval cuts, and whose
utterance IDs and reference word counts agree; otherwise the three cells are empty (as for
archived rows and runs without evaluations: their utterances are not at hand). The selected
row's own difference is 0 with the interval [0, 0], which is what the paired bootstrap of a
system against itself gives (computed without resampling).

Between runs (:data:`BASELINE_DIFF_COLUMNS`, :func:`differences_vs_baseline`): each run's
selected artifact against the baseline run's selected artifact (``report.baseline_run``, else the
first configured run; :mod:`asrflow.report.changes` names what else differs between the two runs)
on each eval set both were evaluated on, under the same conditions; only the selected rows get
them, and the baseline's own selected rows 0 [0, 0]. A baseline with seed replicas
(:mod:`asrflow.replicas`) counts with all of them: a row is compared with the mean of the
replicas' selected artifacts, utterance by utterance, the interval resampling utterances and the
baseline's seeds (:func:`asrflow.evaluate.paired.replicated_difference`); its own replicas get
their difference to that mean.

Against the parent (:data:`PARENT_DIFF_COLUMNS`, :func:`differences_vs_parent`): a fine-tuning
run started from another run's selected model (``init: {run: P}``) gets its selected artifact
against P's selected artifact (the mean of P's replicas, if it has them) on each eval set both
were evaluated on, under the same rules: what this week's fine-tune gained over last week's model.

Example::

    errors = {("r1", "last", "demo.dev"): read_utterance_errors(".../utterances.csv"), ...}
    columns = differences_vs_selected(df, errors)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from asrflow.evaluate.intervals import BOOTSTRAP, Bootstrap
from asrflow.evaluate.paired import UtteranceErrors, replicated_difference

log = logging.getLogger(__name__)

DIFF_COLUMNS = (
    "wer_diff_vs_selected",
    "wer_diff_vs_selected_ci_low",
    "wer_diff_vs_selected_ci_high",
)

BASELINE_DIFF_COLUMNS = (
    "wer_diff_vs_baseline",
    "wer_diff_vs_baseline_ci_low",
    "wer_diff_vs_baseline_ci_high",
)

PARENT_DIFF_COLUMNS = (
    "wer_diff_vs_parent",
    "wer_diff_vs_parent_ci_low",
    "wer_diff_vs_parent_ci_high",
)

EvalKey = tuple[str, str, str]
"""``(run, artifact, eval_set)`` of one evaluation."""

Replicas = Mapping[str, Mapping[str, Any]]
"""``{replica run: {"replica_of": run, "seed": seed}}`` (:func:`asrflow.replicas.replica_runs`)."""


def differences_vs_selected(
    df: pd.DataFrame,
    errors: Mapping[EvalKey, UtteranceErrors],
    bootstrap: Bootstrap = BOOTSTRAP,
) -> pd.DataFrame:
    """The :data:`DIFF_COLUMNS` of every row of the comparison ``df`` (same index; see the
    module docstring for which rows get them)."""
    out = pd.DataFrame(np.nan, index=df.index, columns=list(DIFF_COLUMNS), dtype="float64")
    current = df[df["current"].astype(bool)]
    selected = current[current["selected"].astype(bool)]
    chosen = {(r["run"], r["eval_set"]): r for _, r in selected.iterrows()}
    for i, row in current.iterrows():
        ref = chosen.get((row["run"], row["eval_set"]))
        if ref is not None:
            out.loc[i] = _paired(row, [ref], errors, bootstrap, "the selected")
    return out


def differences_vs_baseline(
    df: pd.DataFrame,
    errors: Mapping[EvalKey, UtteranceErrors],
    baseline: str | None,
    bootstrap: Bootstrap = BOOTSTRAP,
    replicas: Replicas | None = None,
) -> pd.DataFrame:
    """The :data:`BASELINE_DIFF_COLUMNS` of every row of the comparison ``df`` (same index):
    each run's selected artifact against the ``baseline`` run's selected artifact on the same
    eval set (with ``replicas``: against the mean of the selected artifacts of every replica of
    the baseline's run), under the same rules as :func:`differences_vs_selected` (current rows,
    one contract, the same eval cuts, the same utterances). Other rows get empty cells; the
    baseline's own selected rows 0 [0, 0]."""
    reference = {} if baseline is None else dict.fromkeys(df["run"].dropna(), baseline)
    return _against(df, errors, reference, BASELINE_DIFF_COLUMNS, "baseline", bootstrap, replicas)


def differences_vs_parent(
    df: pd.DataFrame,
    errors: Mapping[EvalKey, UtteranceErrors],
    parents: Mapping[str, str],
    bootstrap: Bootstrap = BOOTSTRAP,
    replicas: Replicas | None = None,
) -> pd.DataFrame:
    """The :data:`PARENT_DIFF_COLUMNS` of every row of the comparison ``df``: the selected rows
    of each run of ``parents`` (run -> the run it fine-tuned from) against that parent's selected
    artifact (the mean of its replicas) on the same eval set, as
    :func:`differences_vs_baseline`; other rows get empty cells."""
    return _against(df, errors, parents, PARENT_DIFF_COLUMNS, "parent", bootstrap, replicas)


def _against(
    df: pd.DataFrame,
    errors: Mapping[EvalKey, UtteranceErrors],
    reference: Mapping[str, str],
    columns: Sequence[str],
    role: str,
    bootstrap: Bootstrap,
    replicas: Replicas | None,
) -> pd.DataFrame:
    """``columns`` (difference, interval) of each selected current row of a run of
    ``reference`` against the selected current rows of its reference run's replica group."""
    out = pd.DataFrame(np.nan, index=df.index, columns=list(columns), dtype="float64")
    current = df[df["current"].astype(bool)]
    selected = current[current["selected"].astype(bool)]
    for i, row in selected.iterrows():
        ref_run = reference.get(row["run"])
        if ref_run is None:
            continue
        group = replicas_of(ref_run, replicas or {}) or replica_group(ref_run, replicas or {})
        refs = selected[selected["run"].isin(group) & (selected["eval_set"] == row["eval_set"])]
        if len(refs):
            what = f"{role} {ref_run}'s selected"
            out.loc[i] = _paired(row, [r for _, r in refs.iterrows()], errors, bootstrap, what)
    return out


def replica_group(run: str, replicas: Replicas) -> list[str]:
    """Every replica of the run ``run`` is a replica of (itself included); ``[run]`` for a run
    that is no replica."""
    of = (replicas.get(run) or {}).get("replica_of")
    return [run] if of is None else replicas_of(of, replicas)


def replicas_of(name: str, replicas: Replicas) -> list[str]:
    """The replicas of the configured run ``name``, in seed order."""
    members = [(i["seed"], run) for run, i in replicas.items() if i["replica_of"] == name]
    return [run for _, run in sorted(members)]


def paired_errors(
    rows: Sequence[Mapping[str, Any]], errors: Mapping[EvalKey, UtteranceErrors]
) -> list[UtteranceErrors] | None:
    """The per-utterance errors of the evaluations ``rows``, or ``None`` unless all were scored
    under one known contract on the same eval cuts and their utterances are at hand."""
    if not rows or not all(_same_scoring(r, rows[0]) for r in rows):
        return None
    found = [errors.get(_key(r)) for r in rows]
    return None if any(e is None for e in found) else found


def _paired(
    row: Mapping[str, Any],
    refs: Sequence[Mapping[str, Any]],
    errors: Mapping[EvalKey, UtteranceErrors],
    bootstrap: Bootstrap,
    what: str,
) -> tuple[float, float, float]:
    """``row``'s WER minus the mean WER of ``refs`` (one evaluation, or seed replicas) with the
    paired interval; NaNs where they are not comparable (contract, cuts, utterances) or their
    utterances are not at hand."""
    missing = (np.nan, np.nan, np.nan)
    found = paired_errors([row, *refs], errors)
    if found is None:
        return missing
    mine, theirs = found[0], found[1:]
    if [_key(r) for r in refs] == [_key(row)]:  # itself; without reference words no WER either
        return (0.0, 0.0, 0.0) if mine.ref_words.sum() else missing
    result = replicated_difference([mine], theirs, bootstrap)
    if result is None:
        log.warning(
            "%s %s on %s: its utterances or references differ from %s (%s); no paired difference",
            row["run"],
            row["artifact"],
            row["eval_set"],
            what,
            ", ".join(f"{r['run']} {r['artifact']}" for r in refs),
        )
        return missing
    return result


def _key(row: Mapping[str, Any]) -> EvalKey:
    return (row["run"], row["artifact"], row["eval_set"])


def _same_scoring(row: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    """Both rows scored under one known contract on the same eval cuts."""
    return all(
        not pd.isna(row[k]) and row[k] == ref[k] for k in ("contract_sha256", "eval_cuts_sha256")
    )


def not_compared(df: pd.DataFrame, baseline: str | None, replicas: Replicas) -> pd.Series:
    """Why a current row has no WER difference to its run's selected artifact, or (a selected
    row) to the baseline run's, though that reference was evaluated on the same eval set: the
    two were scored on other eval cuts (another data revision, or another ``evaluation.filter``:
    other utterances) or under another scoring contract; else their utterances or references
    differ. ``None`` where there is nothing to explain."""
    out = pd.Series(None, index=df.index, dtype=object)
    current = df[df["current"].astype(bool) & (df["eval_set"] != "-")]
    selected = current[current["selected"].astype(bool)]
    chosen = {(r["run"], r["eval_set"]): r for _, r in selected.iterrows()}
    group = replica_group(baseline, replicas) if baseline else []
    base = {r["eval_set"]: r for _, r in selected.iterrows() if r["run"] in group}
    for i, row in current.iterrows():
        reasons = []
        ref = chosen.get((row["run"], row["eval_set"]))
        if ref is not None and pd.isna(row["wer_diff_vs_selected"]):
            reasons.append(_why(row, ref, f"{ref['artifact']} (selected)"))
        ref = base.get(row["eval_set"])
        if row["selected"] and ref is not None and pd.isna(row["wer_diff_vs_baseline"]):
            reasons.append(_why(row, ref, f"baseline {ref['run']}"))
        text = "; ".join(r for r in reasons if r)
        out.loc[i] = text or None
    return out


def _why(row: Mapping[str, Any], ref: Mapping[str, Any], name: str) -> str | None:
    if pd.isna(row["wer"]) or pd.isna(ref["wer"]):
        return None  # no WER (no reference words): nothing to compare
    if row["contract_sha256"] != ref["contract_sha256"]:
        return f"not compared with {name}: another scoring contract"
    if row["eval_cuts_sha256"] != ref["eval_cuts_sha256"]:
        partial = [
            r["run"] + "/" + r["artifact"]
            for r in (row, ref)
            if not pd.isna(r.get("utterances_excluded")) and r["utterances_excluded"]
        ]
        what = f" (evaluation.filter excluded some of {', '.join(partial)})" if partial else ""
        return f"not compared with {name}: scored on other utterances{what}"
    return f"not compared with {name}: utterances or references differ"
