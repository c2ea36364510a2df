"""Build ESPnet2 ASR models from a recipe's model section with a char token list (test helper)."""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

CHARS = list(string.ascii_lowercase)
TOKENS = ["<blank>", "<unk>", *CHARS, "<sos/eos>"]

TINY_CTC_MODEL: dict[str, Any] = {
    "frontend": "default",
    "frontend_conf": {"n_fft": 128, "win_length": 128, "hop_length": 64, "n_mels": 20},
    "specaug": None,
    "normalize": None,
    "encoder": "transformer",
    "encoder_conf": {
        "output_size": 16,
        "attention_heads": 2,
        "linear_units": 32,
        "num_blocks": 1,
        "dropout_rate": 0.0,
        "positional_dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "input_layer": "conv2d",
    },
    "model_conf": {"ctc_weight": 1.0, "report_cer": False, "report_wer": False},
}
"""A ~6 k-parameter CTC-only transformer; 4 ms frames, 16 ms after conv2d subsampling."""


def build_asr_model(model_section: Mapping[str, Any], workdir: Path) -> torch.nn.Module:
    """``ASRTask.build_model`` on ``model_section`` with a char token list (a-z)."""
    from espnet2.tasks.asr import ASRTask

    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "model.yaml"
    config.write_text(yaml.safe_dump(dict(model_section)), encoding="utf-8")
    tokens = workdir / "tokens.txt"
    tokens.write_text("\n".join(TOKENS) + "\n", encoding="utf-8")
    argv = ["--config", str(config), "--token_list", str(tokens), "--token_type", "char"]
    args = ASRTask.get_parser().parse_args([*argv, "--output_dir", str(workdir / "out")])
    return ASRTask.build_model(args)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
