"""The workflow config and its settings, read the same way everywhere.

:func:`with_defaults` validates a config against ``config/config.schema.yaml`` and fills in the
schema's defaults, as ``rules/common.smk`` does with Snakemake's ``validate``: the schema is the
one source of defaults, and code given a validated config indexes it (``run["resources"]``)
instead of repeating a default (``.get("resources", {})``). :func:`known_settings` reads a
settings dataclass from a config section; :func:`config_error_message` words a failed validation.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

SCHEMA = Path("config") / "config.schema.yaml"
"""The config schema, relative to the repository root."""
PACKAGED_SCHEMA = Path(__file__).resolve().parent / SCHEMA.name
"""Where a wheel puts its copy of the schema (pyproject.toml's force-include)."""


def schema_file() -> Path:
    """``config/config.schema.yaml`` of the repository this package is in (``src/asrflow/`` is
    installed editable, or shared with the jobs, from the repository), else the copy a wheel
    ships inside the package, else the current directory's (Snakemake runs the workflow from
    its root)."""
    here = Path(__file__).resolve().parents[2] / SCHEMA
    candidates = (here, PACKAGED_SCHEMA, Path.cwd() / SCHEMA)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise AsrflowError(
        f"the config schema is at none of {', '.join(map(str, candidates))}: install asrflow "
        "from its repository (uv sync, pip install -e .) or from a wheel built there, or run "
        "from the repository root"
    )


@functools.cache
def _schema() -> Mapping[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(schema_file().read_text(encoding="utf-8"), Loader=loader)


def schema_defaults(section: str) -> dict[str, Any]:
    """The schema's default of every key of ``section`` that has one (a copy), for the settings
    dataclasses' field defaults: the schema is the one place a default is written, and a
    dataclass built without a config (a test, a benchmark) runs what a config would.

    ``section`` is a dotted path of config keys from the top, ``*`` standing for any name (a
    corpus, a run); ``$ref`` is followed. A list default is returned as a tuple (the
    dataclasses are frozen and hashable).

    >>> schema_defaults("corpora.*.filter")["min_duration"]
    0.3
    """
    root = _schema()
    node: Mapping[str, Any] = root
    for key in section.split("."):
        node = _resolved(root, node)
        child = node.get("additionalProperties") if key == "*" else node["properties"].get(key)
        if not isinstance(child, Mapping):
            raise KeyError(f"{section}: the schema has no section {key!r} there")
        node = child
    node = _resolved(root, node)
    return {
        name: tuple(sub["default"])
        if isinstance(sub["default"], list)
        else copy.deepcopy(sub["default"])
        for name, sub in node.get("properties", {}).items()
        if "default" in sub
    }


def _resolved(root: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with its local ``$ref`` (``#/$defs/...``) followed."""
    while "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def filling_validator(schema: Mapping[str, Any]) -> Any:
    """A Draft 2020-12 validator that fills in defaults while it validates: jsonschema's FAQ
    recipe, as ``snakemake.utils.validate(..., set_default=True)`` extends it, except that each
    default is a copy (Snakemake's runs share one ``resources`` dict, the schema's own)."""
    # jsonschema (0.2 s) only where a config is validated: every job imports this module
    from jsonschema import Draft202012Validator, validators

    validate_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(
        validator: Any, properties: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[Any]:
        if isinstance(instance, dict):  # else the type check reports it, as it should
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": set_defaults})(schema)


def with_defaults(
    config: Mapping[str, Any], schema: Pathlike | None = None, *, source: str = "the config"
) -> dict[str, Any]:
    """A copy of ``config`` validated against the schema (``schema``, default
    :func:`schema_file`, parsed once per process by LibYAML) with the schema's defaults filled
    in, equal to what ``snakemake.utils.validate(config, schema)`` would leave in the workflow's
    config: the workflow validates with it (rules/common.smk), where Snakemake's parsed the
    schema in pure Python at each of its two validations. An invalid config is an
    :class:`AsrflowError` (:func:`config_error_message`, naming ``source``). The input is not
    modified.

    >>> with_defaults({"corpora": {"c": {"source": "synthetic"}}})["smoke"]
    {'max_train_cuts': 16, 'max_dev_cuts': 4, 'max_steps': 3}
    """
    from jsonschema.exceptions import ValidationError  # jsonschema: see filling_validator

    loaded = _schema() if schema is None else yaml.safe_load(Path(schema).read_text("utf-8"))
    filled = copy.deepcopy(dict(config))
    try:
        filling_validator(loaded).validate(filled)
    except ValidationError as e:
        raise AsrflowError(config_error_message(e, source)) from None
    return filled


def with_first_run_as_baseline(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"report": ...}`` of a validated config with ``baseline_run`` set to the first run in
    config order when it is null (the schema's "the first configured run"); ``{}`` when it names
    a run already or there is none. Called before the workflow sorts the config's keys
    (``rules/common.smk``), which would otherwise make the alphabetically first run the baseline.

    >>> with_first_run_as_baseline({"runs": {"b": {}, "a": {}}, "report": {"baseline_run": None}})
    {'report': {'baseline_run': 'b'}}
    """
    report = dict(config.get("report") or {})
    if report.get("baseline_run") is not None or not config.get("runs"):
        return {}
    return {"report": {**report, "baseline_run": next(iter(config["runs"]))}}


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
    from jsonschema.exceptions import ValidationError  # jsonschema: see filling_validator

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
