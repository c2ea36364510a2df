"""The comparison table: every run x artifact x eval set, with the hashes that say what it was.

Inputs are the JSON summaries other rules write:

- train summaries (``results/runs/<run>/train/summary.json``): status, error, update budget,
  hashes of data, tokenizer, recipe and start weights;
- eval summaries (``results/runs/<run>/eval/<artifact>/<eval_set>/summary.json``, schema
  ``asrflow.eval/1``): pooled counts and rates of :func:`asrflow.evaluate.scoring.pooled`, the
  scoring contract's sha256, decoding settings and speed;
- selections (``results/runs/<run>/selected.json``): the chosen artifact of each run and what
  its dev set measures (:mod:`asrflow.report.selection`);
- archived eval summaries: results of earlier data or model revisions, kept by artifact hash
  (:mod:`asrflow.evaluate.archive`);
- per-utterance errors of the current evaluations (their ``utterances.csv``), for each
  artifact's WER difference against its run's selected artifact, and each run's selected
  artifact against the baseline run's (:mod:`asrflow.report.differences`);
- the train steps' provenance records, for what else differs from the baseline run
  (:mod:`asrflow.report.changes`);
- which runs are seed replicas of which (``replica_of``, ``seed``; :mod:`asrflow.report.replicas`).

``wer_ci_low`` ... ``cer_ci_high`` are the summaries' 95 % intervals (a bootstrap over utterances,
:mod:`asrflow.evaluate.intervals`; empty for summaries written before they existed).

Results scored under different contracts (or on different eval cuts) are never ranked together:
``rank`` is computed within one ``(eval_set, eval_cuts_sha256, contract_sha256)`` group of current
rows, and :func:`check_contracts` says in words when there is more than one group per eval set.
An evaluation whose ``evaluation.filter`` excluded utterances has eval cuts of its own
(:func:`asrflow.evaluate.eval_set.scored_sha256`) and counts them (:data:`COVERAGE`,
``excluded_by_reason``); ``not_compared`` says why a row that has a reference to be compared
with has no difference to it.

Example::

    errors = {("r1", "last", "demo.dev"): read_utterance_errors(".../utterances.csv"), ...}
    df = comparison_table(train, evals, selections, load_archive(archive_dir), errors)

:mod:`asrflow.report.tables` writes it as CSV, Markdown and HTML.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from asrflow.evaluate.archive import ARCHIVE_KEY, DECODING_KEY
from asrflow.report.changes import CHANGE_COLUMNS, baseline_of, change_columns
from asrflow.report.differences import (
    BASELINE_DIFF_COLUMNS,
    DIFF_COLUMNS,
    PARENT_DIFF_COLUMNS,
    EvalKey,
    UtteranceErrors,
    differences_vs_baseline,
    differences_vs_parent,
    differences_vs_selected,
    not_compared,
)
from asrflow.report.plans import plan_text
from asrflow.report.replicas import REPLICA_COLUMNS, Replicas, replica_columns
from asrflow.report.selection import DEV_COLUMNS, dev_columns, is_selected

NONE = "-"
"""Artifact and eval set of a row that has no evaluation (a failed or unevaluated run)."""

ERROR_CHARS = 200
"""Longest error text kept in the table (first line of the train summary's error)."""

SHORT = 12
"""Hex digits of a hash shown in the Markdown and HTML tables (the CSV keeps all 64)."""

METRICS = ("wer", "cer", "sentence_error_rate", "rtf")
INTERVALS = ("wer_ci_low", "wer_ci_high", "cer_ci_low", "cer_ci_high")
COUNTS = (
    "substitutions",
    "deletions",
    "insertions",
    "word_errors",
    "num_utterances",
    "ref_words",
    "ref_chars",
    "char_errors",
)
COVERAGE = (
    "utterances_total",
    "utterances_scored",
    "utterances_excluded",
    "seconds_total",
    "seconds_excluded",
)
"""How much of its eval set an evaluation scored (:func:`asrflow.evaluate.eval_set.coverage`;
empty for summaries written before it; ``num_utterances`` is the scored count)."""
HASHES = (
    "artifact_sha256",
    "eval_cuts_sha256",
    "contract_sha256",
    "data_sha256",
    "tokenizer_sha256",
    "recipe_sha256",
    "start_weights_sha256",
)
COLUMNS = (
    "run",
    "artifact",
    "eval_set",
    "wer",
    "cer",
    *INTERVALS,
    *DIFF_COLUMNS,
    *BASELINE_DIFF_COLUMNS,
    "parent_run",
    *PARENT_DIFF_COLUMNS,
    "rank",
    "selected",
    *DEV_COLUMNS,
    "status",
    "error",
    *REPLICA_COLUMNS,
    *CHANGE_COLUMNS,
    "current",
    *COVERAGE,
    "excluded_by_reason",
    "not_compared",
    *COUNTS,
    "sentence_error_rate",
    "rtf",
    "audio_seconds",
    "decode_seconds",
    "dtype",
    "decoding",
    "device",
    "evaluated_at",
    "decoded_by",
    "code_changed",
    *HASHES,
    "effective_batch_seconds",
    "update_budget",
    "plan",
    "steps",
    "epochs",
    "num_parameters",
    "trainable_parameters",
    "adapter_bytes",
    "precision",
    "world_size",
)
"""Columns of :func:`comparison_table`, in order."""

_BUDGET_KEYS = ("max_steps", "optimizer_steps", "max_epochs", "max_audio_seconds")


# --- building the table ------------------------------------------------------------------------


def data_fingerprint(train_cuts: Mapping[str, str] | None) -> str | None:
    """One SHA-256 over the content hashes of a run's training manifests (paths ignored).

    Two runs trained on the same manifests get the same fingerprint even if the files moved.
    """
    if not train_cuts:
        return None
    joined = "\n".join(sorted(str(v) for v in train_cuts.values()))
    return hashlib.sha256(joined.encode("ascii")).hexdigest()


def budget_text(budget: Mapping[str, Any] | None) -> str | None:
    """A compact text of a run's update budget: ``"optimizer_steps=2400"``.

    The step/epoch/audio limits are shown when present; otherwise every key, sorted.
    """
    if not budget:
        return None
    keys = [k for k in _BUDGET_KEYS if k in budget] or sorted(budget)
    return ", ".join(f"{k}={_compact(budget[k])}" for k in keys)


def decoding_text(decoding: Mapping[str, Any] | str | None) -> str | None:
    """Short text of decoding settings: ``"greedy_ctc"``, ``"beam beam_size=10 lm_weight=0.3"``."""
    if decoding is None or isinstance(decoding, str):
        return decoding
    mode = str(decoding.get("mode", "?"))
    rest = [
        f"{k}={_compact(v)}"
        for k, v in sorted(decoding.items())
        if k != "mode" and (v is None or isinstance(v, str | int | float | bool))
    ]
    return " ".join([mode, *rest])


def first_line(error: str | None, limit: int = ERROR_CHARS) -> str | None:
    """The first non-empty line of ``error``, cut to ``limit`` characters (ending in "...")."""
    if not error:
        return None
    line = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _compact(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _trained_from(hashes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The hash columns of what weights were trained from (a train summary's ``hashes``)."""
    hashes = hashes or {}
    return {
        "data_sha256": data_fingerprint(hashes.get("train_cuts")),
        "tokenizer_sha256": hashes.get("bpe_model"),
        "recipe_sha256": hashes.get("recipe"),
        "start_weights_sha256": hashes.get("start_weights"),
    }


def _train_columns(train: Mapping[str, Any] | None) -> dict[str, Any]:
    if train is None:
        return {"status": "unknown"}
    return {
        "status": train.get("status", "unknown"),
        "error": first_line(train.get("error")),
        **_trained_from(train.get("hashes")),
        "effective_batch_seconds": train.get("effective_batch_seconds"),
        "update_budget": budget_text(train.get("update_budget")),
        "plan": plan_text(train.get("plan")),
        "steps": train.get("steps"),
        "epochs": train.get("epochs"),
        "num_parameters": train.get("num_parameters"),
        "trainable_parameters": train.get("trainable_parameters"),
        "precision": train.get("precision"),
        "world_size": train.get("world_size"),
    }


def _eval_columns(summary: Mapping[str, Any]) -> dict[str, Any]:
    row = {
        k: summary.get(k) for k in ("run", "artifact", "eval_set", *METRICS, *INTERVALS, *COUNTS)
    }
    row.update({k: summary.get(k) for k in ARCHIVE_KEY})
    row.update(
        {
            "audio_seconds": summary.get("audio_seconds"),
            "decode_seconds": summary.get("decode_seconds"),
            "dtype": summary.get("dtype"),
            "decoding": decoding_text(summary.get("decoding")),
            "device": summary.get("device"),
            "evaluated_at": summary.get("evaluated_at"),
            "decoded_by": decoded_by(summary),
            **{k: summary.get(k) for k in COVERAGE},
            "excluded_by_reason": excluded_text(summary.get("excluded_by_reason")),
            "code_changed": ", ".join(summary.get("code_changed") or []) or None,
            "adapter_bytes": summary.get("adapter_bytes"),
        }
    )
    return row


def excluded_text(by_reason: Mapping[str, int] | None) -> str | None:
    """``"8 too_long, 1 too_short"``: what ``evaluation.filter`` excluded; ``None`` for nothing.

    >>> excluded_text({"too_long": 8, "too_short": 1})
    '8 too_long, 1 too_short'
    """
    return ", ".join(f"{n} {r}" for r, n in (by_reason or {}).items() if n) or None


def decoded_by(summary: Mapping[str, Any]) -> str | None:
    """``run/artifact`` whose decode an evaluation shares (the same weights: decoded once,
    :mod:`asrflow.evaluate.shared`); ``None`` for an evaluation that decoded itself."""
    by = summary.get("decoded_by") or {}
    own = (summary.get("run"), summary.get("artifact"), summary.get("eval_set"))
    if not by or (by.get("run"), by.get("artifact"), by.get("eval_set")) == own:
        return None
    return f"{by.get('run')}/{by.get('artifact')}"


def _key(summary: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(summary.get(k) for k in (*ARCHIVE_KEY, DECODING_KEY))


def comparison_table(
    train_summaries: Mapping[str, Mapping[str, Any]],
    eval_summaries: Sequence[Mapping[str, Any]],
    selections: Mapping[str, Mapping[str, Any]],
    archived: Sequence[Mapping[str, Any]] = (),
    utterance_errors: Mapping[EvalKey, UtteranceErrors] | None = None,
    *,
    train_records: Mapping[str, Mapping[str, Any]] | None = None,
    baseline_run: str | None = None,
    replicas: Replicas | None = None,
) -> pd.DataFrame:
    """One row per run x artifact x eval set (columns :data:`COLUMNS`), sorted by those three.

    - Current rows (``current=True``) come from ``eval_summaries`` and carry their run's train
      columns (status, hashes, budget).
    - A run whose training failed, or that has no evaluation, gets one row with artifact and
      eval set ``"-"``, its status and error (first line, at most 200 characters), no metrics.
    - ``archived`` summaries whose :data:`ARCHIVE_KEY` equals a current one (or an earlier archived
      one) are dropped; the rest are kept with ``current=False``, with the hashes of what their
      own weights were trained from (the summary's ``run_hashes``, from the package's export
      record; empty for summaries written before they carried them) and *without* the other
      train columns: the current train summary describes a different revision of the model.
    - ``selected``: the artifact is ``selections[run]["selected"]`` (same bytes where the selection
      records its hash); :data:`~asrflow.report.selection.DEV_COLUMNS` (current rows): whether
      the run's dev set measures seen speakers only.
    - ``rank``: 1 = lowest WER among current rows with the same eval set, eval cuts and scoring
      contract; never across contracts.
    - ``wer_diff_vs_selected`` and its interval: from ``utterance_errors`` (per
      ``(run, artifact, eval_set)``), :func:`asrflow.report.differences.differences_vs_selected`.
    - ``baseline_run``, ``changed_vs_baseline``, ``confounded`` (current rows, failed runs
      included): the baseline (``baseline_run``, else the first of ``train_summaries``) and what
      differs from it (:mod:`asrflow.report.changes`; ``train_records``: the train steps'
      provenance records); ``wer_diff_vs_baseline`` and its interval on selected rows
      (:func:`asrflow.report.differences.differences_vs_baseline`: with all seed ``replicas``).
    - ``parent_run`` (a run that fine-tuned another run's selected model, ``init: {run: P}``,
      as its train summary records) and ``wer_diff_vs_parent`` with its interval on selected
      rows (:func:`asrflow.report.differences.differences_vs_parent`).
    """
    baseline = baseline_of(list(train_summaries), baseline_run)
    changes = change_columns(train_summaries, train_records or {}, baseline)
    rows: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    evaluated: set[str] = set()
    for summary in eval_summaries:
        run = summary.get("run")
        evaluated.add(run)
        seen.add(_key(summary))
        row = _eval_columns(summary)
        row.update(_train_columns(train_summaries.get(run)), **changes.get(run, {}))
        row["current"] = True
        row["selected"] = is_selected(summary, selections.get(run))
        row.update(dev_columns(selections.get(run)))
        rows.append(row)
    for run, train in train_summaries.items():
        if run not in evaluated:
            row = {"run": run, "artifact": NONE, "eval_set": NONE, "current": True}
            row.update(_train_columns(train), **changes.get(run, {}))
            row["selected"] = False
            row.update(dev_columns(selections.get(run)))
            rows.append(row)
    for summary in archived:
        if _key(summary) in seen:
            continue
        seen.add(_key(summary))
        row = _eval_columns(summary)
        row.update(_trained_from(summary.get("run_hashes")))  # its own, not the current run's
        row.update(current=False, selected=is_selected(summary, selections.get(row["run"])))
        rows.append(row)
    df = _frame(rows)
    df[list(DIFF_COLUMNS)] = differences_vs_selected(df, utterance_errors or {})
    df[list(REPLICA_COLUMNS)] = replica_columns(df, replicas or {})
    df[list(BASELINE_DIFF_COLUMNS)] = differences_vs_baseline(
        df, utterance_errors or {}, baseline, replicas=replicas
    )
    parents = parent_runs(train_summaries)
    df["parent_run"] = df["run"].map(parents).astype(object)
    df[list(PARENT_DIFF_COLUMNS)] = differences_vs_parent(
        df, utterance_errors or {}, parents, replicas=replicas
    )
    df["not_compared"] = not_compared(df, baseline, replicas or {})
    return df


def parent_runs(train_summaries: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """Run -> the run whose selected model it fine-tuned (its summary's ``init.run``)."""
    out = {}
    for run, summary in train_summaries.items():
        parent = ((summary or {}).get("init") or {}).get("run")
        if parent:
            out[run] = str(parent)
    return out


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    numeric = (*METRICS, *INTERVALS, *DIFF_COLUMNS, *BASELINE_DIFF_COLUMNS, *PARENT_DIFF_COLUMNS)
    seconds = ("audio_seconds", "decode_seconds", "effective_batch_seconds", "seconds_total")
    for col in (*numeric, *seconds, "seconds_excluded"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    utterances = ("utterances_total", "utterances_scored", "utterances_excluded")
    sizes = ("steps", "epochs", "num_parameters", "trainable_parameters", "adapter_bytes")
    sizes += ("world_size",)
    for col in (*COUNTS, *utterances, *sizes):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in HASHES:  # text even where every value is missing (e.g. no start weights)
        df[col] = df[col].astype(object)
    for col in ("selected", "current"):
        df[col] = df[col].fillna(False).astype(bool)
    df["confounded"] = df["confounded"].astype("boolean")  # empty for archived rows
    df["rank"] = _ranks(df)
    df = df.sort_values(
        ["run", "eval_set", "artifact", "current"],
        ascending=[True, True, True, False],
        kind="stable",
    )
    return df.reset_index(drop=True)


def _ranks(df: pd.DataFrame) -> pd.Series:
    ranked = df["current"].astype(bool) & df["wer"].notna() & (df["eval_set"] != NONE)
    groups = df[ranked].groupby(
        ["eval_set", "eval_cuts_sha256", "contract_sha256"], dropna=False, sort=False
    )
    rank = groups["wer"].rank(method="min")
    return rank.reindex(df.index).astype("Int64")


def check_contracts(df: pd.DataFrame) -> list[str]:
    """Notes on current results that must not be compared: one line per problem, [] if none.

    More than one scoring contract among current rows (in total, or within one eval set), or one
    eval set evaluated on different cuts, each gets a line naming the hashes.
    """
    cur = df[df["current"] & (df["eval_set"] != NONE)]
    notes = []
    contracts = sorted(cur["contract_sha256"].dropna().unique())
    if len(contracts) > 1:
        notes.append(
            f"current results were scored under {len(contracts)} different contracts "
            f"({', '.join(c[:SHORT] for c in contracts)}); WER/CER are comparable, and ranked, "
            "only within one contract"
        )
    for eval_set, group in cur.groupby("eval_set", sort=True):
        per_set = sorted(group["contract_sha256"].dropna().unique())
        if len(per_set) > 1:
            notes.append(
                f"eval set {eval_set}: {len(per_set)} scoring contracts "
                f"({', '.join(c[:SHORT] for c in per_set)}); re-evaluate under one contract "
                "before comparing"
            )
        cuts = sorted(group["eval_cuts_sha256"].dropna().unique())
        if len(cuts) > 1:
            notes.append(
                f"eval set {eval_set}: evaluated on {len(cuts)} different sets of utterances "
                f"({', '.join(c[:SHORT] for c in cuts)}: other eval cuts, or an "
                "evaluation.filter that excluded some); ranked separately"
            )
    return notes
