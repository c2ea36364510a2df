"""Nested recipe data (sections of settings): drop keys, flatten, compare, merge overrides."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def without_keys(data: Mapping[str, Any], dotted: frozenset[str]) -> dict[str, Any]:
    """``data`` without the ``section.key`` entries named in ``dotted`` (a deep copy)."""
    out = copy.deepcopy(dict(data))
    for path in dotted:
        section, key = path.split(".")
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


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


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for every dotted key whose value differs between two recipes' data."""
    a, b = flatten(old), flatten(new)
    missing = "(unset)"
    return [
        f"{k}: {a.get(k, missing)!r} -> {b.get(k, missing)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k, missing) != b.get(k, missing)
    ]


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings merge recursively, other values replace."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
