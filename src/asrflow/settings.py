"""Reading a settings dataclass from a config mapping, the same way everywhere."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from asrflow.errors import AsrflowError


def known_settings(cls: type, d: Mapping[str, Any] | None, section: str) -> dict[str, Any]:
    """A copy of ``d``; an unknown key is an :class:`AsrflowError` naming ``section``.

    Missing keys are left out, so the dataclass's defaults apply.
    """
    d = dict(d or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise AsrflowError(
            f"{section}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return d
