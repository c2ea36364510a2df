"""Workflow configs for tests, validated and filled in by the schema as the workflow's are
(:func:`asrflow.settings.with_defaults`): code reads the schema's defaults from the config, so a
hand-built partial config would lack them."""

from __future__ import annotations

from typing import Any

from asrflow.settings import with_defaults

CORPORA = {"c": {"source": "synthetic"}}
"""The one corpus of :func:`config_with_runs` (the schema requires one)."""


def config_with_runs(**runs: dict[str, Any]) -> dict[str, Any]:
    """A validated config with these runs, each given only what it sets besides corpora,
    tokenizer and recipe: ``config_with_runs(a={"resources": {"devices": 2}})``."""
    entries = {
        name: {"corpora": ["c"], "tokenizer": "t", "recipe": "r", **fields}
        for name, fields in runs.items()
    }
    return with_defaults({"corpora": CORPORA, "runs": entries})


def run_settings(**fields: Any) -> dict[str, Any]:
    """One validated run entry: ``run_settings(resources={"devices": 2})["resources"]``."""
    return config_with_runs(r=fields)["runs"]["r"]
