"""ESPnet's side of a model package: its training config (from the parsed ESPnet arguments),
the model that config builds, and the check that a state dict fits that model
(:mod:`asrflow.export.package`).
"""

from __future__ import annotations

import argparse
import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from asrflow.checkpoints import LIGHTNING_PREFIX
from asrflow.errors import AsrflowError
from asrflow.espnet_import import espnet_import
from asrflow.types import Pathlike

REQUIRED_KEYS = (
    "init", "token_list", "token_type", "bpemodel", "input_size", "frontend", "frontend_conf",
    "specaug", "normalize", "normalize_conf", "encoder", "encoder_conf", "ctc_conf", "model_conf",
)  # fmt: skip
"""Keys of ESPnet's arguments without which ``Speech2Text`` cannot rebuild the model."""

VOLATILE_KEYS = ("config", "output_dir")
"""Arguments that name the training run's temporary files; exported as null so that the same
model gives the same config.yaml from any run. Rebuilding the model does not read them."""


def espnet_config(
    espnet_args: Mapping[str, Any] | argparse.Namespace,
    tokens: list[str],
    bpe_model: Path,
) -> dict[str, Any]:
    """ESPnet's training config for a package: plain YAML values, the token list inline,
    ``bpemodel`` = ``bpe_model`` and :data:`VOLATILE_KEYS` nulled."""
    raw = vars(espnet_args) if isinstance(espnet_args, argparse.Namespace) else espnet_args
    config = {str(k): _plain(v, str(k)) for k, v in raw.items()}
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise AsrflowError(
            f"espnet_args lack {', '.join(map(repr, missing))}: ESPnet's Speech2Text cannot "
            "rebuild the model without them; pass the full parsed ESPnet arguments "
            "(build_model's second result or the run's espnet_config.json)"
        )
    trained = config["token_list"]
    if isinstance(trained, list) and trained != tokens:
        raise AsrflowError(
            f"the token list the model was trained with ({len(trained)} tokens) differs from "
            f"tokens.txt ({len(tokens)} tokens); export with the run's own tokenizer files"
        )
    config["token_list"] = list(tokens)
    config["bpemodel"] = str(bpe_model)
    for key in VOLATILE_KEYS:
        if key in config:
            config[key] = None
    return config


def yaml_text(config: Mapping[str, Any]) -> str:
    """config.yaml as ESPnet writes it (no YAML aliases), with sorted keys for stable bytes."""
    with espnet_import():  # ESPnet (seconds to import) only in the jobs that write or build models
        from espnet2.utils.yaml_no_alias_safe_dump import yaml_no_alias_safe_dump

    return yaml_no_alias_safe_dump(dict(config), indent=4, sort_keys=True)


def build_espnet_model(config: Mapping[str, Any]) -> torch.nn.Module:
    """``ASRTask.build_model`` on a config mapping, as ``Speech2Text`` does it."""
    with espnet_import():  # ESPnet (seconds to import) only in the jobs that write or build models
        from espnet2.tasks.asr import ASRTask

    args = argparse.Namespace(**copy.deepcopy(dict(config)))
    try:
        with torch.random.fork_rng(devices=[]):  # initialisation draws leave the caller's RNG
            return ASRTask.build_model(args)
    except AttributeError as exc:
        name = getattr(exc, "name", None)
        if getattr(exc, "obj", None) is args and name:
            raise AsrflowError(
                f"espnet_args lack {name!r}, which ESPnet needs to build the model; pass the "
                "full parsed ESPnet arguments"
            ) from exc
        raise


def check_state_dict(
    state: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    *,
    source: Pathlike = "<state dict>",
) -> None:
    """Raise unless ``state`` has exactly the keys of ``reference``, with the same shapes."""
    for key in sorted(state):
        if key not in reference:
            hint = (
                f"; it still carries the Lightning {LIGHTNING_PREFIX!r} prefix, so this is a "
                "module's state dict saved without the checkpoint around it: export the "
                "Lightning checkpoint itself"
                if key.startswith(LIGHTNING_PREFIX) and key[len(LIGHTNING_PREFIX) :] in reference
                else ""
            )
            raise AsrflowError(
                f"{source}: key {key!r} is not in the model that the ESPnet arguments build "
                f"({len(reference)} keys, e.g. {next(iter(reference))!r}){hint}"
            )
        want, got = tuple(reference[key].shape), tuple(state[key].shape)
        if want != got:
            raise AsrflowError(
                f"{source}: key {key!r} has shape {list(got)}, the model built from the ESPnet "
                f"arguments has {list(want)}; the checkpoint belongs to another model config"
            )
    missing = [k for k in reference if k not in state]
    if missing:
        raise AsrflowError(
            f"{source}: the model built from the ESPnet arguments has {len(missing)} key(s) the "
            f"checkpoint lacks, e.g. {missing[0]!r}; the checkpoint belongs to another model "
            "config (ESPnet would silently keep random weights for them)"
        )


def _plain(value: Any, key: str) -> Any:
    """``value`` as YAML-safe plain data (tuples as lists), or an error naming ``key``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise AsrflowError(
        f"espnet_args: {key!r} is a {type(value).__name__} ({value!r}), which config.yaml "
        "cannot hold"
    )
