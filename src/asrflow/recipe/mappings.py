"""Nested recipe data (sections of settings): drop keys, merge overrides (flattening and
comparing them: :mod:`asrflow.params`), overrides from ``KEY=VALUE`` items (the benchmarks'
``--set``)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from asrflow.errors import AsrflowError


def without_keys(data: Mapping[str, Any], dotted: frozenset[str]) -> dict[str, Any]:
    """``data`` without the ``section.key`` entries named in ``dotted`` (a deep copy)."""
    out = copy.deepcopy(dict(data))
    for path in dotted:
        section, key = path.split(".")
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings merge recursively, other values replace."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def dotted_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Recipe overrides from ``section.key=value`` items, each value parsed as YAML, later items
    merged over earlier ones (what ``bench/*.py --set`` takes).

    >>> dotted_overrides(["batching.num_buckets=30", "trainer.seed=1", "batching.shuffle=false"])
    {'batching': {'num_buckets': 30, 'shuffle': False}, 'trainer': {'seed': 1}}
    """
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise AsrflowError(f"{item!r}: expected section.key=value (e.g. batching.seed=1)")
        nested: Any = yaml.safe_load(value)
        for part in reversed(key.split(".")):
            nested = {part: nested}
        overrides = deep_merge(overrides, nested)
    return overrides
