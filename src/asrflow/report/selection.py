"""The columns a run's selection (its ``selected.json``, :mod:`asrflow.select.choose`) gives the
comparison's rows: which row is the selected artifact, and what the run's dev set measures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEV_COLUMNS = ("dev_measures", "dev_note")
"""``"seen speakers only"`` and the message saying so, where the run's dev set shares every speaker
with its train sets while a test set has new ones (:mod:`asrflow.data.dev_groups`); else empty."""


def is_selected(summary: Mapping[str, Any], selection: Mapping[str, Any] | None) -> bool:
    """The row is the run's selected artifact (and, where known, the same bytes)."""
    if not selection or summary.get("artifact") != selection.get("selected"):
        return False
    chosen = (selection.get("candidates") or {}).get(selection.get("selected")) or {}
    sha = chosen.get("artifact_sha256")
    return sha is None or sha == summary.get("artifact_sha256")


def dev_columns(selection: Mapping[str, Any] | None) -> dict[str, Any]:
    """:data:`DEV_COLUMNS` of a run's current rows, from its selection (empty for one written
    before it recorded them, and for a run without a selection)."""
    selection = selection or {}
    return {
        "dev_measures": selection.get("dev_measures"),
        "dev_note": (selection.get("dev_groups") or {}).get("message"),
    }
