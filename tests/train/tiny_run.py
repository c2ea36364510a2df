"""A whole training run in miniature: noise audio, a char tokenizer, a ~6 k-parameter CTC model.

``make_tiny_run(root)`` writes everything :func:`asrflow.train.run.runner.train_run` reads and
returns its :class:`~asrflow.train.spec.RunSpec`; a run of a few steps takes seconds on a CPU.
Also usable from a subprocess (the DDP and preemption tests): ``python -m tests.train.tiny_run``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from asrflow.recipe.load import load_recipe
from asrflow.recipe.load import with_overrides as recipe_with_overrides
from asrflow.train.spec import RunSpec, spec_from_json, spec_to_json  # noqa: F401 (re-exported)
from tests.conftest import utterance_rows, write_nemo, write_wav
from tests.train.tiny_espnet import TINY_CTC_MODEL

TINY_RECIPE: dict[str, Any] = {
    **TINY_CTC_MODEL,
    "trainer": {
        "max_steps": 4,
        "val_check_interval": 2,
        "gradient_clip_val": 5.0,
        "accelerator": "cpu",
        "precision": "32-true",
    },
    "optim": {"name": "adamw", "lr": 0.002},
    "scheduler": {"warmup": 1},
    "batching": {"max_duration": 3.0, "num_buckets": 2, "num_workers": 0},
    "best_model_criterion": [["valid/loss", 1, "min"]],
    "diagnostics": {"num_decode_utterances": 2},
}
"""Four steps of batches up to 3 s, validated every 2 steps."""

SPEAKERS = {"train": ["a", "b", "c", "f"], "dev": ["d"]}
"""12 train cuts (1.0-1.5 s), 3 dev cuts."""


def make_tiny_run(
    root: Path,
    recipe: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    name: str = "tiny",
) -> RunSpec:
    """Write corpus, tokenizer and recipe under ``root``; the run's spec."""
    from asrflow.data.cuts import save_cuts
    from asrflow.data.importers import import_nemo
    from asrflow.text import TextNormalization
    from asrflow.tokenizer import TokenizerConfig, train_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    norm = TextNormalization()
    paths = {}
    for split, speakers in SPEAKERS.items():
        rows = utterance_rows(split, speakers)
        for k, r in enumerate(rows):
            write_wav(root / "corpus" / r["audio_filepath"], r["duration"], seed=k)
        manifest = write_nemo(root / "corpus" / f"{split}.jsonl", rows)
        paths[split] = root / f"{split}.jsonl.gz"
        save_cuts(import_nemo(manifest), paths[split])
    model, tokens = root / "bpe.model", root / "tokens.txt"
    train_tokenizer(paths["train"], model, tokens, TokenizerConfig(model_type="char"), norm)
    recipe_path = root / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(dict(recipe or TINY_RECIPE)), encoding="utf-8")
    return RunSpec(
        name=name,
        recipe=load_recipe(recipe_path, overrides),
        recipe_name=str(recipe_path),
        train_cuts=[str(paths["train"])],
        dev_cuts=str(paths["dev"]),
        bpe_model=str(model),
        tokens=str(tokens),
        normalization=norm.to_dict(),
    )


def with_overrides(spec: RunSpec, overrides: Mapping[str, Any]) -> RunSpec:
    """``spec`` with ``overrides`` deep-merged over its recipe (as ``runs.<run>.overrides``)."""
    return dataclasses.replace(spec, recipe=recipe_with_overrides(spec.recipe, overrides))
