"""Runs that start from other runs: ``runs.<run>.init: {run: <parent>}``.

:func:`with_init_runs` turns such an ``init`` into an ordinary ``init.model``, when the config is
read (``rules/common.smk``, after :func:`asrflow.replicas.expand_replicas`): the model is the
parent's :func:`asrflow.layout.selected_package`, the copy rule ``publish_selected`` makes of
the package the parent's selection chose. The child's training then takes those files as
inputs, so the DAG holds the edge: a parent that retrains and selects new weights retrains its
children; one whose selection comes out byte-identical reruns none of them. ``init.run`` stays
beside ``init.model`` for the record (the child's ``summary.json`` names the parent run and the
package's own lineage: :mod:`asrflow.train.init.weights`).

Example::

    with_init_runs({"runs": {"week1": {...}, "week2": {..., "init": {"run": "week1"}}}})
    # {"runs": {"week1": {...},
    #           "week2": {..., "init": {"run": "week1", "model": "results/runs/week1/selected"}}}}
"""

from __future__ import annotations

from typing import Any

from asrflow.errors import AsrflowError
from asrflow.layout import selected_package
from asrflow.project import Config


def with_init_runs(config: Config) -> dict[str, Any]:
    """``{"runs": ...}`` with ``init.model`` set to the parent's :func:`selected_package` for
    every run whose ``init`` names a ``run`` (kept beside it, for the record); an error naming
    the key for an unknown parent, a parent with seed replicas (name one), the run itself or a
    cycle. Run after :func:`asrflow.replicas.expand_replicas`."""
    runs = {name: dict(r) for name, r in config.get("runs", {}).items()}
    parents = {}
    for name, r in runs.items():
        init = r.get("init") or {}
        parent = init.get("run")
        if parent is None:
            continue
        if parent not in runs:
            replicas = [n for n, other in runs.items() if other.get("replica_of") == parent]
            hint = (
                f"it has seed replicas: name one of {', '.join(replicas)}"
                if replicas
                else f"choose one of {', '.join(n for n in runs if n != name)}"
            )
            raise AsrflowError(f"runs.{name}.init.run: unknown run {parent!r}; {hint}")
        if parent == name:
            raise AsrflowError(f"runs.{name}.init.run: a run cannot start from itself")
        parents[name] = parent
        r["init"] = {**init, "model": selected_package(parent)}
    for name in parents:
        seen = [name]
        while seen[-1] in parents:
            seen.append(parents[seen[-1]])
            if seen[-1] in seen[:-1]:
                raise AsrflowError(
                    f"runs.{name}.init.run: the runs start from each other in a cycle "
                    f"({' -> '.join(seen)})"
                )
    return {"runs": runs}
