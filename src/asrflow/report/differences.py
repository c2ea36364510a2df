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
them, and the baseline's own selected rows 0 [0, 0].

Example::

    errors = {("r1", "last", "demo.dev"): read_utterance_errors(".../utterances.csv"), ...}
    columns = differences_vs_selected(df, errors)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from asrflow.evaluate.intervals import BOOTSTRAP, Bootstrap
from asrflow.evaluate.paired import UtteranceErrors, paired_difference

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

EvalKey = tuple[str, str, str]
"""``(run, artifact, eval_set)`` of one evaluation."""


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
            out.loc[i] = _paired(row, ref, errors, bootstrap, "the selected")
    return out


def differences_vs_baseline(
    df: pd.DataFrame,
    errors: Mapping[EvalKey, UtteranceErrors],
    baseline: str | None,
    bootstrap: Bootstrap = BOOTSTRAP,
) -> pd.DataFrame:
    """The :data:`BASELINE_DIFF_COLUMNS` of every row of the comparison ``df`` (same index):
    each run's selected artifact against the ``baseline`` run's selected artifact on the same
    eval set, under the same rules as :func:`differences_vs_selected` (current rows, one
    contract, the same eval cuts, the same utterances). Other rows get empty cells; the
    baseline's own selected rows 0 [0, 0]."""
    out = pd.DataFrame(np.nan, index=df.index, columns=list(BASELINE_DIFF_COLUMNS), dtype="float64")
    if baseline is None:
        return out
    current = df[df["current"].astype(bool)]
    selected = current[current["selected"].astype(bool)]
    chosen = {r["eval_set"]: r for _, r in selected[selected["run"] == baseline].iterrows()}
    for i, row in selected.iterrows():
        ref = chosen.get(row["eval_set"])
        if ref is not None:
            out.loc[i] = _paired(row, ref, errors, bootstrap, f"baseline {baseline}'s selected")
    return out


def _paired(
    row: Mapping[str, Any],
    ref: Mapping[str, Any],
    errors: Mapping[EvalKey, UtteranceErrors],
    bootstrap: Bootstrap,
    what: str,
) -> tuple[float, float, float]:
    """``row``'s WER minus ``ref``'s with the paired interval; NaNs where they are not
    comparable (contract, cuts, utterances) or their utterances are not at hand."""
    missing = (np.nan, np.nan, np.nan)
    if not _same_scoring(row, ref):
        return missing
    mine, theirs = (errors.get(_key(r)) for r in (row, ref))
    if mine is None or theirs is None:
        return missing
    if _key(row) == _key(ref):  # itself; without reference words it has no WER either
        return (0.0, 0.0, 0.0) if mine.ref_words.sum() else missing
    result = paired_difference(mine, theirs, bootstrap)
    if result is None:
        log.warning(
            "%s %s on %s: its utterances or references differ from %s %s's; no paired difference",
            row["run"],
            row["artifact"],
            row["eval_set"],
            what,
            ref["artifact"],
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
