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


def config_error_message(error: Exception, source: str = "the config") -> str:
    """One readable paragraph for a failed schema validation of the workflow config.

    ``error`` is the :class:`jsonschema.exceptions.ValidationError` (or Snakemake's
    ``WorkflowError`` wrapping one, as :func:`snakemake.utils.validate` raises it). Its ``str``
    dumps the whole schema and config (hundreds of lines); this names the key by its dotted
    path, what is wrong, what is allowed there and the key's description, and nothing else.
    """
    from jsonschema.exceptions import ValidationError

    found: Any = error
    while found is not None and not isinstance(found, ValidationError):
        # Snakemake's WorkflowError keeps only the text; the original is its context
        found = found.__cause__ or found.__context__
    if found is None:
        return f"{source}: {error}"
    path = ".".join(str(p) for p in found.absolute_path) or "(top level)"
    schema = found.schema if isinstance(found.schema, dict) else {}
    if found.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        given = found.instance if isinstance(found.instance, dict) else {}
        extra = sorted(set(given) - set(allowed))
        what = f"unknown key(s) {', '.join(map(repr, extra))}"
        if allowed:
            what += f"; the keys allowed here are {', '.join(allowed)}"
        hint = "Check the spelling and the indentation (is the key under the right section?)"
    else:
        what = found.message
        described = schema.get("description")
        hint = f"Expected: {described}" if described else "See config/config.schema.yaml."
    return f"{source}, {path}: {what}. {hint}"
