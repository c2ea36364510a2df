"""Nested recipe data (sections of settings): drop keys, merge overrides (flattening and
comparing them: :mod:`asrflow.params`)."""

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


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings merge recursively, other values replace."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
