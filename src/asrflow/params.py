"""Rule params that reach a job's script but never rerun it.

Snakemake reruns a job when the ``repr`` of one of its params changed since the outputs were made
(its ``params`` rerun trigger). Some settings a script needs cannot change what it writes: the
device and batch size evaluation decodes with, the loader workers of a training run, the
diagnostics it logs. A rule wraps those in :class:`Operational`; Snakemake's trigger compares only
plain Python values (``snakemake.persistence``: a param that is not a builtin is left out of the
comparison), so changing them reruns nothing, while the script reads them like any mapping and
the provenance record still lists them.

Operational params, rule by rule (``tests/test_training_e2e.py`` checks that they rerun nothing):

- ``evaluate``: ``evaluation.device``, ``evaluation.batch_seconds`` (and ``evaluation.resources``,
  which are Snakemake resources, never params);
- ``audit_batches``, ``smoke_train``, ``train``: the recipe's
  :data:`~asrflow.recipe.sections.OPERATIONAL_KEYS` (loader workers, diagnostics; on a run that
  trains from shards the loader workers are settings:
  :data:`~asrflow.recipe.sections.SHARD_DEALING_KEYS`);
- every rule: ``threads`` and ``resources`` (never params).

Also here, because comparing settings is needed on both sides of the training stack (the stale
work directory's log line, the report's "what changed" column) and must not import it: nested
settings flattened to dotted keys and compared key by key (:func:`flatten`,
:func:`changed_values`, :func:`changed_keys`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def canonical(value: Any) -> Any:
    """``value`` with mapping keys sorted at every level and tuples as lists, so that equal
    settings have one ``repr`` (what Snakemake compares) and one JSON form, however a config
    or recipe file orders its keys.

    >>> canonical({"b": 1, "a": {"d": (1, 2), "c": None}})
    {'a': {'c': None, 'd': [1, 2]}, 'b': 1}
    """
    if isinstance(value, Mapping):
        return {str(k): canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


class Operational(Mapping[str, Any]):
    """A read-only mapping of settings that do not change a job's outputs (see the module doc).

    Deliberately not a ``dict`` subclass: that is what keeps it out of Snakemake's comparison.
    Its ``repr`` names the keys only, so it may also sit inside a dict param (whose ``repr`` is
    what Snakemake compares): adding or removing a key reruns, changing a value does not.

    >>> p = Operational({"device": "cpu"})
    >>> p["device"], dict(p), p
    ('cpu', {'device': 'cpu'}, Operational(device))
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        # keys only: inside a dict param, Snakemake compares the dict's repr, which holds this
        return f"Operational({', '.join(map(str, self._values))})"


UNSET = "(unset)"
"""What :func:`changed_values` gives for a key one side does not have."""


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def changed_values(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted key, old value, new value)`` for every key whose value differs between two
    nested settings, sorted by key; a key only one side has gets :data:`UNSET` on the other.

    >>> changed_values({"optim": {"lr": 0.002, "eps": 1e-8}}, {"optim": {"lr": 0.0015}})
    [('optim.eps', 1e-08, '(unset)'), ('optim.lr', 0.002, 0.0015)]
    """
    a, b = flatten(old), flatten(new)
    return [
        (k, a.get(k, UNSET), b.get(k, UNSET))
        for k in sorted(set(a) | set(b))
        if a.get(k, UNSET) != b.get(k, UNSET)
    ]


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for every dotted key whose value differs between two recipes' data."""
    return [f"{k}: {a!r} -> {b!r}" for k, a, b in changed_values(old, new)]
