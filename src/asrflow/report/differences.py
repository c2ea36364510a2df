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
        if ref is None or not _same_scoring(row, ref):
            continue
        mine, theirs = (errors.get(_key(r)) for r in (row, ref))
        if mine is None or theirs is None:
            continue
        if _key(row) == _key(ref):  # itself; without reference words it has no WER either
            out.loc[i] = (0.0, 0.0, 0.0) if mine.ref_words.sum() else np.nan
            continue
        result = paired_difference(mine, theirs, bootstrap)
        if result is None:
            log.warning(
                "%s %s on %s: its utterances or references differ from the selected %s's; "
                "no paired difference",
                row["run"],
                row["artifact"],
                row["eval_set"],
                ref["artifact"],
            )
            continue
        out.loc[i] = result
    return out


def _key(row: Mapping[str, Any]) -> EvalKey:
    return (row["run"], row["artifact"], row["eval_set"])


def _same_scoring(row: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    """Both rows scored under one known contract on the same eval cuts."""
    return all(
        not pd.isna(row[k]) and row[k] == ref[k] for k in ("contract_sha256", "eval_cuts_sha256")
    )
