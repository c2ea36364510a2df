"""Seed replicas: ``runs.<run>.seeds: [0, 1, 2]`` trains the run once per seed.

:func:`expand_replicas` replaces such a run, when the config is read (``rules/common.smk``, after
the schema check), by one ordinary run per seed, named :func:`replica_name` (``base-seed0``,
``base-seed1``, ...): the same corpora, tokenizer, recipe, overrides and resources, with
``overrides.trainer.seed`` (initialisation, dropout) and ``overrides.batching.seed`` (the order
of batches) set to the seed. Each replica then has its own recipe hash, work directory, train
job (independent: a cluster runs them side by side), exports, evaluations and selection. Each
replica's run entry also says whose replica it is (:data:`REPLICA_OF`, :data:`SEED`), which
:func:`replica_runs` hands to the report (:mod:`asrflow.report.replicas`) to aggregate them.

A ``report.baseline_run`` that names a replicated run is pointed at its first replica: the
report compares with all the replicas of the baseline's run.

Example::

    expand_replicas({"runs": {"base": {..., "seeds": [0, 1]}}, ...})["runs"]
    # {"base-seed0": {..., "overrides": {"trainer": {"seed": 0}, "batching": {"seed": 0}},
    #                 "replica_of": "base", "seed": 0}, "base-seed1": {...}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asrflow.errors import AsrflowError

SEEDS = "seeds"
"""The key of a run that asks for replicas."""
REPLICA_OF = "replica_of"
"""Added to a replica's run entry: the name of the run it is a replica of."""
SEED = "seed"
"""Added to a replica's run entry: its seed."""
SEEDED = ("trainer", "batching")
"""Recipe sections whose ``seed`` a replica sets: initialisation and dropout, batch order."""


def replica_name(run: str, seed: int) -> str:
    """The run name of a replica: ``replica_name("base", 1) == "base-seed1"`` (the ``run``
    wildcard allows ``-``, not ``.``)."""
    return f"{run}-seed{seed}"


def expand_replicas(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every run that has ``seeds`` replaced by its replicas (in place, in
    config order; see the module docstring) and ``report.baseline_run`` naming such a run
    pointed at its first replica. Runs without ``seeds`` are left as they are (a ``seeds: null``
    filled in by the schema is dropped). The input is not modified."""
    runs: dict[str, Any] = {}
    first: dict[str, str] = {}
    plain = {n for n, r in config.get("runs", {}).items() if r.get(SEEDS) is None}
    for name, run in config.get("runs", {}).items():
        entry = {k: v for k, v in run.items() if k != SEEDS}
        seeds = run.get(SEEDS)
        if seeds is None:
            runs[name] = entry
            continue
        for seed in _checked_seeds(name, run):
            replica = replica_name(name, seed)
            if replica in plain or replica in runs:
                raise AsrflowError(
                    f"runs.{name}.seeds: its replica {replica!r} has the name of another run; "
                    "rename that run"
                )
            runs[replica] = {
                **entry,
                "overrides": _seeded(entry, seed),
                REPLICA_OF: name,
                SEED: seed,
            }
            first.setdefault(name, replica)
    out = {**config, "runs": runs}
    report = config.get("report") or {}
    baseline = report.get("baseline_run")
    if baseline in first:
        out["report"] = {**report, "baseline_run": first[baseline]}
    return out


def replica_runs(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{replica run: {"replica_of": run, "seed": seed}}`` of an expanded config (what the
    report is given; empty without replicas)."""
    return {
        name: {REPLICA_OF: run[REPLICA_OF], SEED: run[SEED]}
        for name, run in config.get("runs", {}).items()
        if REPLICA_OF in run
    }


def _checked_seeds(name: str, run: Mapping[str, Any]) -> list[int]:
    """The seeds of a replicated run; an error for an empty or repeated list, a seed that is not
    a non-negative integer, or a seed also set in ``overrides`` (which would win silently)."""
    seeds = list(run[SEEDS])
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise AsrflowError(f"runs.{name}.seeds: a list of non-negative integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise AsrflowError(f"runs.{name}.seeds: each seed once, got {seeds!r}")
    overrides = run.get("overrides") or {}
    for section in SEEDED:
        if SEED in (overrides.get(section) or {}):
            raise AsrflowError(
                f"runs.{name}: seeds and overrides.{section}.seed both set the seed; "
                f"drop overrides.{section}.seed"
            )
    return seeds


def _seeded(run: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The run's overrides with the seed of every :data:`SEEDED` section set to ``seed``."""
    overrides = dict(run.get("overrides") or {})
    for section in SEEDED:
        overrides[section] = {**(overrides.get(section) or {}), SEED: seed}
    return overrides
