"""A fine-tuning run's model, taken from the package it starts from (``init.architecture``).

A run with ``init: {model: <package>}`` trains the architecture the package describes (its
ESPnet ``config.yaml``: frontend, normalize, encoder, decoder, CTC and model keys) with its own
recipe's training sections: the recipe does not spell out the starting model again, key for key,
as ESPnet's ``--init_param`` and a copied config require. A key of ``runs.<run>.overrides``
under one of those sections always wins (``encoder_conf.dropout_rate``), and one that changes a
shape is named by the load's error (:mod:`asrflow.train.init.weights`). ``init.architecture:
recipe`` keeps the recipe's own model keys (a plain ``.pth`` with no config beside it needs it).

SpecAugment is not taken: it has no weights, and what the target corpus needs (real speech,
its hours: :mod:`asrflow.recipe.rules`) decides it, as NeMo's fine-tuning configs set their own
``spec_augment``.

Applied by every job that builds the model (batch audit, smoke run, training), from the package
the job has as an input, so a package made by another run of the same DAG works too.

Example::

    data, record = inherit_architecture(data, "exp/asr_base", ["encoder_conf.dropout_rate"])
    record["overridden"]  # ['encoder_conf.dropout_rate']
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from asrflow.errors import AsrflowError
from asrflow.export.find import find_config
from asrflow.hashing import sha256_file
from asrflow.params import flatten
from asrflow.recipe.plan import deep_update, inside, nest, overridden
from asrflow.types import Pathlike

PACKAGE = "package"
RECIPE = "recipe"
ARCHITECTURE_SOURCES = (PACKAGE, RECIPE)
"""The values of ``init.architecture``."""

ARCHITECTURE_KEYS = (
    "frontend", "frontend_conf", "normalize", "normalize_conf", "preencoder", "preencoder_conf",
    "encoder", "encoder_conf", "postencoder", "postencoder_conf", "decoder", "decoder_conf",
    "ctc_conf", "joint_net_conf", "model", "model_conf",
)  # fmt: skip
"""The ESPnet keys that describe the model (its components and their settings) and so come
from the starting package. A key the package lacks is dropped from the recipe too (ESPnet's
default then), so that a recipe's decoder is never kept silently beside an encoder-only
package."""


def takes_package_architecture(init: Mapping[str, Any] | None) -> bool:
    """Whether a run's ``init`` (schema defaults filled in) takes its model from the package."""
    return bool(init) and init.get("architecture", PACKAGE) == PACKAGE


def read_architecture(model_path: Pathlike) -> tuple[Path, dict[str, Any]]:
    """The package's ``config.yaml`` and its :data:`ARCHITECTURE_KEYS`; an error when it has no
    such file (a bare ``.pth``) or the file describes no model."""
    config = find_config(model_path)
    if config is None:
        raise AsrflowError(
            f"init.model {str(model_path)!r} has no config.yaml beside its weights to take the "
            "model's architecture from; give a package or ESPnet model directory, or set "
            "init.architecture: recipe to build the model the recipe describes"
        )
    with open(config, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, Mapping) or not data.get("encoder"):
        raise AsrflowError(
            f"{config}: names no encoder, so it describes no ESPnet ASR model to start from "
            "(init.model); set init.architecture: recipe to build the recipe's model"
        )
    arch = {k: copy.deepcopy(data[k]) for k in ARCHITECTURE_KEYS if k in data}
    _resolve_stats_file(arch, config)
    return config, arch


def _resolve_stats_file(arch: dict[str, Any], config: Path) -> None:
    """global_mvn's ``stats_file`` as a path that exists: as written (ESPnet writes it relative
    to the recipe directory it trained in), else relative to the package; an error otherwise."""
    conf = arch.get("normalize_conf")
    if arch.get("normalize") != "global_mvn" or not isinstance(conf, dict):
        return
    stats = conf.get("stats_file")
    if not stats or Path(stats).is_file():
        return
    beside = config.parent / stats
    candidates = [beside, config.parent / Path(stats).name]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise AsrflowError(
            f"{config}: normalize_conf.stats_file {stats!r} (global_mvn) is neither a file nor "
            f"one beside the package; copy the feature statistics there, or override "
            "normalize_conf.stats_file in runs.<run>.overrides"
        )
    conf["stats_file"] = str(found)


def inherit_architecture(
    data: Mapping[str, Any], model_path: Pathlike, explicit: Iterable[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Recipe ``data`` with the package's model keys in place of the recipe's, except under the
    ``explicit`` keys (dotted: what the run's overrides set, which ``data`` already holds); and
    the record of it for the run's summary: the config file, its SHA-256, the keys taken and the
    keys the overrides set within them."""
    config, arch = read_architecture(model_path)
    explicit = sorted(explicit)
    out = copy.deepcopy(dict(data))
    given = flatten(out)
    kept: list[str] = []
    for key in ARCHITECTURE_KEYS:
        if overridden(key, explicit) is not None:
            kept.append(key)
            continue
        if key not in arch:
            out.pop(key, None)
            continue
        value = copy.deepcopy(arch[key])
        within = inside(key, explicit)
        if within and isinstance(value, dict):
            value = deep_update(
                value, nest((k[len(key) + 1 :], given[k]) for k in within if k in given)
            )
            kept += within
        out[key] = value
    record = {
        "from": str(config),
        "config_sha256": sha256_file(config),
        "keys": [k for k in ARCHITECTURE_KEYS if k in arch],
        "overridden": kept,
    }
    return out, record
