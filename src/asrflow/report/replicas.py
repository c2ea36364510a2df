"""Seed replicas in the report: each replicated run's mean WER, spread and interval.

A run with ``seeds: [0, 1, 2]`` is trained as the runs ``<run>-seed0``, ...
(:mod:`asrflow.replicas`). The comparison table keeps one row per replica, with
:data:`REPLICA_COLUMNS` (``replica_of``, ``seed``; empty for other runs).
:func:`replica_table` (``results/report/replicas.csv``, and a section of the Markdown and HTML
report) has one row per replicated run x eval set, over the artifact each replica selected on
dev (:data:`SUMMARY_COLUMNS`, rates as fractions):

- ``replicas``: how many replicas have a current selected evaluation there; ``missing`` names the
  others (failed or not evaluated); ``seeds`` and ``selected`` (artifact names, how many chose
  each) say which;
- ``wer_mean``, ``wer_sd`` (the sample standard deviation over replicas, ``ddof=1``; empty for one),
  ``wer_min``, ``wer_max``: of the replicas' WERs;
- ``wer_mean_ci_low``/``_high``: the 95 % interval of the mean WER, a bootstrap that resamples the
  utterances and, in each resample, the replicas (:func:`asrflow.evaluate.paired.
  replicated_difference`), so it covers both which utterances were tested and which seeds were
  drawn; with 2 or 3 seeds the seed part is if anything too narrow (read it with ``wer_sd``);
- ``wer_diff_vs_baseline`` and its interval: the mean WER minus that of the baseline run (all its
  replicas, if it has them), utterances paired, utterances and both runs' seeds resampled; the
  baseline's own rows 0 [0, 0]. Empty (as the interval) unless every evaluation involved was
  scored under one contract on the same eval cuts and utterances.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from asrflow.evaluate.intervals import BOOTSTRAP, Bootstrap
from asrflow.evaluate.paired import replicated_difference
from asrflow.report.differences import (
    BASELINE_DIFF_COLUMNS,
    EvalKey,
    Replicas,
    UtteranceErrors,
    paired_errors,
    replica_group,
    replicas_of,
)

log = logging.getLogger(__name__)

REPLICA_COLUMNS = ("replica_of", "seed")
"""Columns of the comparison table naming the run a row's run is a replica of, and its seed."""

SUMMARY_COLUMNS = (
    "run",
    "eval_set",
    "replicas",
    "seeds",
    "selected",
    "wer_mean",
    "wer_mean_ci_low",
    "wer_mean_ci_high",
    "wer_sd",
    "wer_min",
    "wer_max",
    "baseline_run",
    *BASELINE_DIFF_COLUMNS,
    "missing",
)
"""Columns of :func:`replica_table`, in order."""


def replica_columns(df: pd.DataFrame, replicas: Replicas) -> pd.DataFrame:
    """The :data:`REPLICA_COLUMNS` of every row of the comparison ``df`` (same index)."""
    info = [replicas.get(run) or {} for run in df["run"]]
    return pd.DataFrame(
        {
            "replica_of": pd.Series([i.get("replica_of") for i in info], dtype=object),
            "seed": pd.array([i.get("seed") for i in info], dtype="Int64"),
        },
        index=df.index,
    )


def replica_table(
    df: pd.DataFrame,
    errors: Mapping[EvalKey, UtteranceErrors],
    replicas: Replicas,
    baseline: str | None,
    bootstrap: Bootstrap = BOOTSTRAP,
) -> pd.DataFrame:
    """One row per replicated run x eval set (:data:`SUMMARY_COLUMNS`; see the module
    docstring), from the current selected rows of the comparison ``df``, the evaluations'
    per-utterance ``errors`` and ``replicas`` (:func:`asrflow.replicas.replica_runs`);
    ``baseline``: the baseline run of the comparison (a replicated one stands for all its
    replicas)."""
    current = df[df["current"].astype(bool) & df["selected"].astype(bool)]
    base_runs = replica_group(baseline, replicas) if baseline is not None else []
    base_name = (replicas.get(baseline) or {}).get("replica_of", baseline)
    rows = []
    for name in dict.fromkeys(info["replica_of"] for info in replicas.values()):
        members = replicas_of(name, replicas)
        chosen = current[current["run"].isin(members)]
        for eval_set in sorted(chosen["eval_set"].unique()):
            mine = _in_seed_order(chosen[chosen["eval_set"] == eval_set], members)
            base = _in_seed_order(current[current["eval_set"] == eval_set], base_runs)
            row = _summary(name, eval_set, members, mine, replicas, errors, bootstrap)
            row["baseline_run"] = base_name
            row.update(_vs_baseline(mine, base, members == base_runs, errors, bootstrap))
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    table["replicas"] = table["replicas"].astype("Int64")
    return table


def _in_seed_order(rows: pd.DataFrame, runs: list[str]) -> list[pd.Series]:
    """The rows of ``runs`` (one per run at most), in the order of ``runs``."""
    by_run = {r["run"]: r for _, r in rows.iterrows()}
    return [by_run[run] for run in runs if run in by_run]


def _summary(
    name: str,
    eval_set: str,
    members: list[str],
    rows: list[pd.Series],
    replicas: Replicas,
    errors: Mapping[EvalKey, UtteranceErrors],
    bootstrap: Bootstrap,
) -> dict[str, Any]:
    """The columns of one replicated run on one eval set, up to the baseline's."""
    wers = np.array([float(r["wer"]) for r in rows], dtype=np.float64)
    present = [r["run"] for r in rows]
    chosen = pd.Series([r["artifact"] for r in rows]).value_counts(sort=False)
    low = high = np.nan
    found = paired_errors(rows, errors)
    interval = replicated_difference(found, None, bootstrap) if found else None
    if interval is not None:
        _, low, high = interval
    elif len(rows) > 1:
        log.warning("%s on %s: replicas not comparable; no interval of their mean", name, eval_set)
    return {
        "run": name,
        "eval_set": eval_set,
        "replicas": len(rows),
        "seeds": ", ".join(str(replicas[r]["seed"]) for r in present),
        "selected": ", ".join(f"{a} x{n}" for a, n in chosen.items()),
        "wer_mean": float(wers.mean()),
        "wer_mean_ci_low": low,
        "wer_mean_ci_high": high,
        "wer_sd": float(wers.std(ddof=1)) if len(wers) > 1 else np.nan,
        "wer_min": float(wers.min()),
        "wer_max": float(wers.max()),
        "missing": ", ".join(r for r in members if r not in present) or None,
    }


def _vs_baseline(
    mine: list[pd.Series],
    base: list[pd.Series],
    is_baseline: bool,
    errors: Mapping[EvalKey, UtteranceErrors],
    bootstrap: Bootstrap,
) -> dict[str, float]:
    """The :data:`~asrflow.report.differences.BASELINE_DIFF_COLUMNS` of one replicated run on
    one eval set: its mean WER minus the baseline's (``base``: its evaluations there)."""
    missing = dict.fromkeys(BASELINE_DIFF_COLUMNS, np.nan)
    found = paired_errors([*mine, *base], errors) if base else None
    if found is None:
        return missing
    if is_baseline:
        result = (0.0, 0.0, 0.0) if found[0].ref_words.sum() else None
    else:
        result = replicated_difference(found[: len(mine)], found[len(mine) :], bootstrap)
    return missing if result is None else dict(zip(BASELINE_DIFF_COLUMNS, result, strict=True))
