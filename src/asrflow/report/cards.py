"""A summary card per run, as the HTML page shows it (:mod:`asrflow.report.page`): which
artifact the run selected, its WER on dev and test with their intervals and against the
baseline run, the selection gate's decision (average kept or not) and its significance, what
changed against the baseline run, why a failed run failed, and the run's decoding settings and
hashes once (instead of in every row of the table).

A run with seed replicas (``runs.<run>.seeds``) gets one card for all its replicas: the mean
WER with its interval and the spread over seeds (:func:`asrflow.report.replicas.replica_table`),
and a line per replica.

Example::

    for card in run_cards(df, selections, replica_table(df, errors, replicas, baseline)):
        print(card.name, card.selected, [r.wer for r in card.results])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from asrflow.report.cells import (
    as_text,
    missing,
    partial,
    points,
    scored_text,
    short,
    with_interval,
)
from asrflow.report.comparison import NONE
from asrflow.report.replicas import SUMMARY_COLUMNS

BETTER = "fewer errors"
WORSE = "more errors"
UNCLEAR = "no significant difference"
"""Verdicts on a difference to the baseline run: its 95 % interval below 0, above 0, or
containing 0."""

KEPT = "average kept"
NOT_KEPT = "average not kept"
NO_AVERAGE = "no average"
"""The selection gate's decisions (:mod:`asrflow.select.choose`)."""

Details = tuple[tuple[str, str], ...]
"""``(label, value)`` pairs of a run's settings and hashes."""


@dataclass(frozen=True)
class Result:
    """A run's selected artifact (a replicated run: the mean of its replicas' selected
    artifacts) on one eval set."""

    eval_set: str
    role: str
    """``"dev"`` (what the run selected on), ``"test"``, or ``""`` without a selection."""
    wer: str
    """WER % with its 95 % interval: ``"12.20 [10.10, 14.50]"``."""
    point: str = ""
    """WER % alone: ``"12.20"``."""
    cer: str = ""
    vs_baseline: str = ""
    verdict: str = ""
    """:data:`BETTER`, :data:`WORSE`, :data:`UNCLEAR`, or ``""`` (no difference measured)."""
    vs_parent: str = ""
    """A fine-tuning run's: its WER minus its parent run's selected artifact's, with the
    interval (``"-2.10 [-3.40, -0.90]"``)."""
    note: str = ""
    """Replicated runs: the standard deviation and range of the replicas' WERs; a WER on part
    of its eval set: how much of it was scored."""


@dataclass(frozen=True)
class Gate:
    """The selection gate of a run: average kept or not, and the significance of the best
    average's dev WER difference to the best single checkpoint where it was computed."""

    decision: str
    reason: str
    significance: str = ""
    significant: bool | None = None
    required: bool = False


@dataclass(frozen=True)
class Seed:
    """One replica of a replicated run."""

    run: str
    seed: str
    status: str
    selected: str
    decision: str
    wers: tuple[tuple[str, str], ...]
    """``(eval_set, WER %)`` of its selected artifact."""
    error: str = ""


@dataclass(frozen=True)
class RunCard:
    """What the page says about one run (or one replicated run)."""

    name: str
    status: str
    baseline: bool
    selected: str
    selected_sha: str
    results: tuple[Result, ...]
    gate: Gate | None
    change: str
    confounded: bool
    error: str
    notes: tuple[str, ...]
    details: tuple[tuple[str, Details], ...]
    """``(title, details)`` per run: one section, or one per replica."""
    seeds: tuple[Seed, ...] = ()
    parent: str = ""
    """The run whose selected model this run fine-tuned (``init: {run: ...}``), or ``""``."""

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def gate_of(selection: Mapping[str, Any] | None) -> Gate | None:
    """The gate's decision in a run's ``selected.json`` (``None`` without one)."""
    if not selection or not selection.get("selected"):
        return None
    reason = as_text(selection.get("reason"))
    required = bool(selection.get("require_significant"))
    average = selection.get("best_average")
    if not average:
        return Gate(NO_AVERAGE, reason, required=required)
    decision = KEPT if selection["selected"] == average.get("artifact") else NOT_KEPT
    sig = selection.get("significance")
    if not sig:
        return Gate(decision, reason, required=required)
    level = f"{100 * float(sig.get('level', 0.95)):g} %"
    verdict = "significant" if sig.get("significant") else "not significant"
    interval = with_interval(sig.get("wer_diff"), sig.get("ci_low"), sig.get("ci_high"), "+")
    text = (
        f"{sig.get('artifact')} - {sig.get('against')} on {selection.get('eval_set')}: "
        f"{interval} points ({level} interval), {verdict}"
    )
    return Gate(decision, reason, text, bool(sig.get("significant")), required)


def verdict(diff: Any, low: Any, high: Any) -> str:
    """:data:`BETTER`, :data:`WORSE` or :data:`UNCLEAR` for a WER difference to the baseline
    with its interval; ``""`` where there is none."""
    if missing(diff) or missing(low) or missing(high):
        return ""
    if high < 0:
        return BETTER
    return WORSE if low > 0 else UNCLEAR


def _roles(selection: Mapping[str, Any] | None, eval_set: str) -> str:
    if not selection or not selection.get("eval_set"):
        return ""
    return "dev" if selection["eval_set"] == eval_set else "test"


def _results(rows: pd.DataFrame, selection: Mapping[str, Any] | None) -> tuple[Result, ...]:
    """The selected artifact's results of one run, dev first."""
    chosen = rows[rows["selected"]]
    out = [
        Result(
            eval_set=r.eval_set,
            role=_roles(selection, r.eval_set),
            wer=with_interval(r.wer, r.wer_ci_low, r.wer_ci_high),
            point=points(r.wer),
            note=f"partial: {scored_text(r)}" if partial(r.utterances_excluded) else "",
            cer=with_interval(r.cer, r.cer_ci_low, r.cer_ci_high),
            vs_baseline=with_interval(
                r.wer_diff_vs_baseline,
                r.wer_diff_vs_baseline_ci_low,
                r.wer_diff_vs_baseline_ci_high,
                "+",
            ),
            verdict=verdict(
                r.wer_diff_vs_baseline,
                r.wer_diff_vs_baseline_ci_low,
                r.wer_diff_vs_baseline_ci_high,
            ),
            vs_parent=with_interval(
                r.wer_diff_vs_parent, r.wer_diff_vs_parent_ci_low, r.wer_diff_vs_parent_ci_high, "+"
            ),
        )
        for r in chosen.itertuples()
    ]
    return tuple(sorted(out, key=lambda r: (r.role != "dev", r.eval_set)))


def _unique(values: pd.Series) -> list[str]:
    return list(dict.fromkeys(as_text(v) for v in values if not missing(v)))


def _per(rows: pd.DataFrame, key: str, column: str, fmt: Any = as_text) -> str:
    """``column`` of ``rows`` once if it is the same everywhere, else each value with the
    ``key`` values that have it: ``"greedy_ctc (demo.dev); beam (demo.test)"``."""
    keys: dict[str, list[str]] = {}
    for k, v in rows[[key, column]].itertuples(index=False):
        if not missing(v):
            have = keys.setdefault(fmt(v), [])
            have += [] if k in have else [str(k)]
    if len(keys) <= 1:
        return next(iter(keys), "")
    return "; ".join(f"{v} ({', '.join(k)})" for v, k in keys.items())


def details_of(rows: pd.DataFrame) -> Details:
    """A run's settings and hashes (its current rows ``rows``), each once: decoding, device and
    dtype, hashes of the artifacts, data, tokenizer, recipe, start weights, scoring contract and
    eval cuts, and the training's budget and size. Empty values are left out."""
    first = rows.iloc[0]
    evaluated = rows[rows["eval_set"] != NONE]
    batch = first["effective_batch_seconds"]
    items = [
        ("decoding", _per(evaluated, "eval_set", "decoding")),
        ("device, dtype", ", ".join(_unique(evaluated["device"]) + _unique(evaluated["dtype"]))),
        ("artifact sha256", _per(evaluated, "artifact", "artifact_sha256", short)),
        ("data sha256", short(first["data_sha256"])),
        ("tokenizer sha256", short(first["tokenizer_sha256"])),
        ("recipe sha256", short(first["recipe_sha256"])),
        ("start weights sha256", short(first["start_weights_sha256"])),
        ("contract sha256", ", ".join(short(v) for v in _unique(evaluated["contract_sha256"]))),
        ("eval cuts sha256", _per(evaluated, "eval_set", "eval_cuts_sha256", short)),
        ("update budget", as_text(first["update_budget"])),
        ("effective batch", "" if missing(batch) else f"{float(batch):g} s of audio per step"),
        ("steps, epochs", ", ".join(_unique(first[["steps", "epochs"]]))),
        ("parameters", _parameters(first)),
        ("precision, world size", ", ".join(_unique(first[["precision", "world_size"]]))),
        ("plan (recipe: auto)", as_text(first["plan"])),
        ("code changed since", ", ".join(_unique(rows["code_changed"]))),
    ]
    return tuple((k, v) for k, v in items if v)


def _parameters(row: pd.Series) -> str:
    """``1,234,567``, or with part of them frozen (a fine-tuning run's init.freeze or
    init.adapter) ``1,234,567 (12,345 trainable)``, and for a LoRA run the size of its
    adapter-only export: ``1,234,567 (12,345 trainable; adapter 52.1 kB)``."""
    total, trainable = row["num_parameters"], row.get("trainable_parameters")
    if missing(total):
        return ""
    text = f"{int(total):,}"
    parts = []
    if not missing(trainable) and int(trainable) != int(total):
        parts.append(f"{int(trainable):,} trainable")
    adapter = row.get("adapter_bytes")
    if not missing(adapter):
        parts.append(f"adapter {int(adapter) / 1000:,.1f} kB")
    return text + (f" ({'; '.join(parts)})" if parts else "")


def _notes(rows: pd.DataFrame) -> tuple[str, ...]:
    first = rows.iloc[0]
    notes = []
    if (rows["eval_set"] == NONE).all() and first["status"] != "failed":
        notes.append(f"not evaluated (status {as_text(first['status']) or 'unknown'})")
    if not missing(first["dev_measures"]):
        notes.append(f"chosen on a dev set of {first['dev_measures']}")
    if rows["code_changed"].map(lambda v: not missing(v)).any():
        notes.append("made by code that has changed since: force a rerun to refresh")
    return tuple(notes)


def plain_card(rows: pd.DataFrame, selection: Mapping[str, Any] | None) -> RunCard:
    """The card of one run from its current rows of the comparison and its selection."""
    first = rows.iloc[0]
    chosen = rows[rows["selected"]]
    return RunCard(
        name=str(first["run"]),
        status=as_text(first["status"]) or "unknown",
        baseline=first["run"] == first["baseline_run"],
        selected=as_text(chosen["artifact"].iloc[0]) if len(chosen) else "",
        selected_sha=short(chosen["artifact_sha256"].iloc[0]) if len(chosen) else "",
        results=_results(rows, selection),
        gate=gate_of(selection),
        change=""
        if first["run"] == first["baseline_run"]
        else as_text(first["changed_vs_baseline"]),
        confounded=not missing(first["confounded"]) and bool(first["confounded"]),
        error=as_text(first["error"]),
        notes=_notes(rows),
        details=((str(first["run"]), details_of(rows)),),
        parent=as_text(first["parent_run"]),
    )


def _seed(card: RunCard, seed: Any) -> Seed:
    return Seed(
        run=card.name,
        seed=as_text(seed),
        status=card.status,
        selected=card.selected,
        decision=card.gate.decision if card.gate else "",
        wers=tuple((r.eval_set, r.point) for r in card.results),
        error=card.error,
    )


def replica_card(
    name: str, members: list[RunCard], seeds: list[Any], summary: pd.DataFrame
) -> RunCard:
    """The card of replicated run ``name``: its replicas' cards ``members`` (in seed order,
    ``seeds``) and its rows of :func:`~asrflow.report.replicas.replica_table` (``summary``)."""
    roles = {r.eval_set: r.role for m in members for r in m.results}
    results = tuple(
        Result(
            eval_set=s.eval_set,
            role=roles.get(s.eval_set, ""),
            wer=with_interval(s.wer_mean, s.wer_mean_ci_low, s.wer_mean_ci_high),
            point=points(s.wer_mean),
            vs_baseline=with_interval(
                s.wer_diff_vs_baseline,
                s.wer_diff_vs_baseline_ci_low,
                s.wer_diff_vs_baseline_ci_high,
                "+",
            ),
            verdict=verdict(
                s.wer_diff_vs_baseline,
                s.wer_diff_vs_baseline_ci_low,
                s.wer_diff_vs_baseline_ci_high,
            ),
            note=f"sd {points(s.wer_sd) or '-'}, range {points(s.wer_min)} - {points(s.wer_max)}",
        )
        for s in summary.itertuples()
    )
    statuses = {m.status for m in members}
    missing_runs = _unique(summary["missing"]) if len(summary) else []
    return RunCard(
        name=name,
        status=statuses.pop() if len(statuses) == 1 else "partly failed",
        baseline=any(m.baseline for m in members),
        selected=", ".join(_unique(summary["selected"])) if len(summary) else "",
        selected_sha="",
        results=tuple(sorted(results, key=lambda r: (r.role != "dev", r.eval_set))),
        gate=None,
        change=members[0].change if members else "",
        confounded=any(m.confounded for m in members),
        error="",
        notes=tuple(f"replicas without a result: {m}" for m in missing_runs),
        details=tuple(d for m in members for d in m.details),
        seeds=tuple(_seed(m, s) for m, s in zip(members, seeds, strict=True)),
    )


def run_cards(
    df: pd.DataFrame,
    selections: Mapping[str, Mapping[str, Any]] | None = None,
    replicas: pd.DataFrame | None = None,
) -> list[RunCard]:
    """One card per current run of the comparison ``df`` (a replicated run: one for all its
    replicas, from the seed ``replicas`` table): the baseline run first, then completed runs,
    then the others (failed, not evaluated), each by name."""
    selections = selections or {}
    current = df[df["current"]]
    cards: dict[str, RunCard] = {}
    groups: dict[str, list[tuple[RunCard, Any]]] = {}
    for run, rows in current.groupby("run", sort=True):
        card = plain_card(rows, selections.get(str(run)))
        replica_of = rows["replica_of"].iloc[0]
        if missing(replica_of):
            cards[card.name] = card
        else:
            groups.setdefault(str(replica_of), []).append((card, rows["seed"].iloc[0]))
    table = replicas if replicas is not None else pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    for name, members in groups.items():
        members.sort(key=lambda m: (missing(m[1]), 0 if missing(m[1]) else int(m[1])))
        summary = table[table["run"] == name]
        cards[name] = replica_card(name, [m for m, _ in members], [s for _, s in members], summary)
    order = {"completed": 1, "partly failed": 1}
    return sorted(
        cards.values(), key=lambda c: (0 if c.baseline else order.get(c.status, 2), c.name)
    )
