"""Building ESPnet2 ASR models from an asrflow recipe's model section.

The model section of a recipe uses ESPnet2's own keys (``frontend``, ``encoder_conf``, ...), so it
is handed to ``ASRTask`` exactly as ESPnet's own ``asr_train.py`` would see it: written as a YAML
config and parsed by ESPnet's argument parser, which fills in ESPnet's defaults. The parsed
arguments are kept: they are what an exported package's ``config.yaml`` must contain for
``espnet2.bin.asr_inference.Speech2Text`` to rebuild the same model.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from asrflow.errors import AsrflowError
from asrflow.espnet_import import espnet_import
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


def espnet_args(
    model_conf: Mapping[str, Any], tokens_txt: Pathlike, bpe_model: Pathlike
) -> argparse.Namespace:
    """ESPnet's parsed training arguments for a model section, a token list and a BPE model."""
    with espnet_import():  # ESPnet (seconds to import) only when a model is built
        from espnet2.tasks.asr import ASRTask

    with tempfile.TemporaryDirectory(prefix="asrflow-espnet-") as tmp:
        config = Path(tmp) / "model.yaml"
        config.write_text(yaml.safe_dump(dict(model_conf)), encoding="utf-8")
        argv = [
            "--config",
            str(config),
            "--token_list",
            str(Path(tokens_txt).resolve()),
            "--token_type",
            "bpe",
            "--bpemodel",
            str(Path(bpe_model).resolve()),
            "--output_dir",
            str(Path(tmp) / "unused"),
        ]
        parser = ASRTask.get_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits on unknown keys / bad values
            raise AsrflowError(
                f"ESPnet rejected the recipe's model section (see the message above): {exc}; "
                "check the ESPnet keys (frontend, encoder, encoder_conf, ...) of the recipe"
            ) from None
    # ESPnet reads the token list file itself; keep the list in args like asr_train.py does
    with open(tokens_txt, encoding="utf-8") as f:
        args.token_list = [line.rstrip("\n") for line in f if line.strip()]
    return args


def build_model(
    model_conf: Mapping[str, Any], tokens_txt: Pathlike, bpe_model: Pathlike
) -> tuple[torch.nn.Module, argparse.Namespace]:
    """Build an ``ESPnetASRModel`` with ``ASRTask.build_model``; returns (model, args)."""
    with espnet_import():  # ESPnet (seconds to import) only when a model is built
        from espnet2.tasks.asr import ASRTask

    args = espnet_args(model_conf, tokens_txt, bpe_model)
    model = ASRTask.build_model(args)
    n = sum(p.numel() for p in model.parameters())
    log.info(
        "built ESPnet model: encoder %s, decoder %s, %.2f M parameters",
        getattr(args, "encoder", None),
        getattr(args, "decoder", None),
        n / 1e6,
    )
    return model, args


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
