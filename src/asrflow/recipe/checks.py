"""Recipe data to a :class:`~asrflow.recipe.sections.Recipe`, and the checks of its values.

:func:`recipe_from_dict` checks types and keys while parsing (each section's dataclass may check
its own values too, as :class:`~asrflow.recipe.batching.Batching` does); :func:`check_recipe`
checks the ranges of single settings and how settings fit together, ESPnet's model keys included.
Every error names the recipe (``source``) and the key.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from types import NoneType, UnionType
from typing import Any, NoReturn

from asrflow.errors import AsrflowError
from asrflow.recipe.sections import (
    ACCELERATORS,
    DEFAULT_CRITERIA,
    MODES,
    NORMALIZATIONS,
    OPTIMIZER_IMPLEMENTATIONS,
    OPTIMIZERS,
    PRECISIONS,
    SCHEDULERS,
    SECTION_TYPES,
    SECTIONS,
    Criterion,
    LossConfig,
    Recipe,
    total_steps,
    warmup_steps,
)

ESPNET_SUPERSEDED_KEYS: dict[str, str] = {
    "optim_conf": "optim (e.g. optim: {name: adam, lr: 0.002})",
    "scheduler_conf": "scheduler (warmup_cosine with scheduler.warmup)",
    "max_epoch": "trainer.max_steps (optimizer steps)",
    "accum_grad": "trainer.accumulate_grad_batches",
    "grad_clip": "trainer.gradient_clip_val",
    "use_amp": "trainer.precision (e.g. bf16-mixed)",
    "ngpu": "trainer.devices",
    "seed": "trainer.seed",
    "batch_type": "batching.max_duration (seconds of audio per batch)",
    "batch_bins": "batching.max_duration (seconds of audio per batch)",
    "batch_size": "batching.max_duration (seconds of audio per batch)",
    "num_workers": "batching.num_workers",
    "keep_nbest_models": "best_model_criterion ([monitor, top_k, mode] entries)",
    "patience": "trainer.max_steps (asrflow does not stop early)",
    "lightning_conf": "trainer",
    "token_list": "nothing: asrflow passes the tokenizer's token list",
    "bpemodel": "nothing: asrflow passes the tokenizer's model",
    "token_type": "nothing: asrflow's tokenizers are SentencePiece models (token_type bpe)",
}
"""ESPnet training keys a recipe must not carry, with what replaces each."""

ESPNET_CHOICES: dict[str, tuple[str, ...]] = {
    "frontend": (
        "default", "sliding_window", "s3prl", "espnet_ssl", "fused", "whisper", "huggingface",
        "wav2vec_cnn",
    ),
    "specaug": ("specaug",),
    "normalize": ("global_mvn", "utterance_mvn"),
    "model": ("espnet", "maskctc", "pit_espnet"),
    "preencoder": ("sinc", "linear"),
    "encoder": (
        "conformer", "transformer", "transformer_multispkr", "contextual_block_transformer",
        "contextual_block_conformer", "vgg_rnn", "rnn", "wav2vec2", "hubert", "hubert_pretrain",
        "torchaudiohubert", "longformer", "branchformer", "whisper", "e_branchformer", "avhubert",
        "multiconv_conformer", "beats",
    ),
    "postencoder": ("hugging_face_transformers", "length_adaptor"),
    "decoder": (
        "transformer", "lightweight_conv", "lightweight_conv2d", "dynamic_conv", "dynamic_conv2d",
        "rnn", "transducer", "mlm", "whisper", "hugging_face_transformers", "s4", "linear_decoder",
    ),
    "preprocessor": ("default", "multi"),
}  # fmt: skip
"""The names ESPnet's ``ASRTask`` accepts for each component key of a recipe (its
``class_choices_list``, ESPnet 202611; null is a value of its own, left to ESPnet), so that a
misspelt name (``encoder: conformerr``) stops when the recipe is read, before any job runs,
instead of as ESPnet's ValueError in the smoke run. ``tests/train/test_recipe.py`` compares it
with the installed ESPnet's."""


def recipe_from_dict(
    data: Mapping[str, Any], source: str = "recipe", *, key_prefix: str = ""
) -> Recipe:
    """Parse recipe data: types and keys, and the values of a section that checks its own
    (``batching``); :func:`check_recipe` checks the other values. ``key_prefix``: what an error
    puts before a key's name (``runs.<run>.overrides.`` for a run's overrides)."""
    model = {k: v for k, v in data.items() if k not in SECTIONS}
    sections = {
        name: _parse_section(cls, name, data.get(name), source, key_prefix)
        for name, cls in SECTION_TYPES.items()
    }
    criteria = _parse_criteria(data.get("best_model_criterion", _UNSET), source, key_prefix)
    return Recipe(model=model, criteria=criteria, **sections)


_UNSET: Any = object()


def _parse_section(cls: type, name: str, raw: Any, source: str, prefix: str = "") -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        hint = ""
        if name in ("optim", "scheduler") and isinstance(raw, str):
            hint = (
                f"; {name}: {raw} is ESPnet's syntax, write {name}: {{name: ..., ...}} instead "
                f"(see the recipe docs) and drop {name}_conf"
            )
        raise AsrflowError(
            f"{source}: {prefix}{name} must be a mapping of settings, got {raw!r}{hint}"
        )
    hints = typing.get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise AsrflowError(
            f"{source}: unknown key(s) {', '.join(f'{prefix}{name}.{k}' for k in unknown)}; "
            f"known keys of {name}: {', '.join(known)}"
        )
    values = {}
    for key, value in raw.items():
        if name == "trainer" and key == "precision" and isinstance(value, int):
            value = str(value)  # YAML `precision: 32`
        try:
            values[key] = _coerce(value, hints[key])
        except TypeError:
            raise AsrflowError(
                f"{source}: {prefix}{name}.{key} must be {_describe(hints[key])}, got {value!r}"
            ) from None
    try:
        return cls(**values)
    except AsrflowError as e:  # a section that checks its own values (batching: "batching.<key>")
        raise AsrflowError(f"{source}: {prefix}{e}") from None


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` checked against a simple type hint (YAML ints accepted as floats)."""
    if isinstance(hint, UnionType):
        for arm in typing.get_args(hint):
            try:
                return _coerce(value, arm)
            except TypeError:
                continue
        raise TypeError(value)
    if hint is NoneType:
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis and isinstance(value, list | tuple):
            return tuple(_coerce(v, args[0]) for v in value)
        if isinstance(value, list | tuple) and len(value) == len(args):
            return tuple(_coerce(v, a) for v, a in zip(value, args, strict=True))
    raise TypeError(value)


def _describe(hint: Any) -> str:
    if isinstance(hint, UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is NoneType:
        return "null"
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        return "a list of numbers" if Ellipsis in args else f"a list of {len(args)} numbers"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(
        hint, str(hint)
    )


def _parse_criteria(raw: Any, source: str, prefix: str = "") -> tuple[Criterion, ...]:
    if raw is _UNSET:
        return DEFAULT_CRITERIA
    if not isinstance(raw, list):
        raise AsrflowError(
            f"{source}: {prefix}best_model_criterion must be a list of [monitor, top_k, mode], "
            f"got {raw!r}"
        )
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, Mapping):
            item = [item.get("monitor"), item.get("top_k"), item.get("mode")]
        try:
            monitor, top_k, mode = (
                _coerce(v, h) for v, h in zip(item, (str, int, str), strict=True)
            )
        except (TypeError, ValueError):
            raise AsrflowError(
                f"{source}: {prefix}best_model_criterion[{i}] = {item!r} must be "
                "[monitor, top_k, mode], e.g. [valid/loss, 3, min] (ESPnet2's [valid, loss, min] "
                "and ESPnet3's [valid/acc, max, 10] orders are not accepted)"
            ) from None
        out.append(Criterion(monitor, top_k, mode))
    return tuple(out)


_POSITIVE_INT = (lambda v: v >= 1, ">= 1")
_NON_NEGATIVE = (lambda v: v >= 0, ">= 0")
_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "trainer.max_steps": _POSITIVE_INT,
    "trainer.val_check_interval": _POSITIVE_INT,
    "trainer.accumulate_grad_batches": _POSITIVE_INT,
    "trainer.devices": _POSITIVE_INT,
    "trainer.num_nodes": _POSITIVE_INT,
    "trainer.seed": _NON_NEGATIVE,
    "trainer.precision": (lambda v: v in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
    "trainer.accelerator": (lambda v: v in ACCELERATORS, f"one of {', '.join(ACCELERATORS)}"),
    "trainer.gradient_clip_val": (lambda v: v is None or v > 0, "> 0 or null (no clipping)"),
    "optim.name": (lambda v: v in OPTIMIZERS, f"one of {', '.join(OPTIMIZERS)}"),
    "optim.lr": (lambda v: v > 0, "> 0"),
    "optim.eps": (lambda v: v > 0, "> 0"),
    "optim.weight_decay": _NON_NEGATIVE,
    "optim.betas": (lambda v: all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
    "optim.momentum": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "optim.implementation": (
        lambda v: v in OPTIMIZER_IMPLEMENTATIONS,
        f"one of {', '.join(OPTIMIZER_IMPLEMENTATIONS)}",
    ),
    "scheduler.name": (lambda v: v in SCHEDULERS, f"one of {', '.join(SCHEDULERS)}"),
    "scheduler.min_lr_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "loss.normalization": (lambda v: v in NORMALIZATIONS, f"one of {', '.join(NORMALIZATIONS)}"),
    "augmentation.speed_perturb": (
        lambda v: all(0.5 <= f <= 2.0 for f in v) and len(set(v)) == len(v),
        "distinct speed factors in [0.5, 2.0] (e.g. [0.9, 1.0, 1.1]), or [] for none",
    ),
    "augmentation.vtlp": (
        lambda v: len(v) == 0 or (len(v) == 2 and 0.5 <= v[0] <= v[1] <= 2.0),
        "[low, high] warp factors with 0.5 <= low <= high <= 2.0 (e.g. [0.9, 1.1]), or [] for none",
    ),
    "augmentation.noise_snr": (
        lambda v: len(v) == 0 or (len(v) == 2 and -10 <= v[0] <= v[1] <= 100),
        "[low, high] SNRs in dB with -10 <= low <= high <= 100 (e.g. [10, 30]), or [] for none",
    ),
    "diagnostics.num_decode_utterances": _NON_NEGATIVE,
    "diagnostics.spike_factor": (lambda v: v > 1, "> 1"),
    "diagnostics.spike_window": _POSITIVE_INT,
    "diagnostics.spike_z": (lambda v: v > 0, "> 0"),
    "diagnostics.spike_min_excess": _NON_NEGATIVE,
    "diagnostics.max_consecutive_nonfinite": _POSITIVE_INT,
    "diagnostics.max_unk_share": (lambda v: 0 <= v <= 1, "a share in [0, 1] (0.001 = 0.1 %)"),
}
"""Range checks of single settings (``batching`` checks its own when parsed:
:class:`~asrflow.recipe.batching.Batching`); cross-checks are in :func:`check_recipe`."""


def check_recipe(recipe: Recipe, source: str = "recipe") -> None:
    """Raise :class:`AsrflowError` naming the first inconsistent or out-of-range setting."""

    def fail(msg: str) -> NoReturn:
        raise AsrflowError(f"{source}: {msg}")

    _check_model(recipe.model, recipe.loss, fail)
    for path, (ok, expected) in _RANGES.items():
        section, key = path.split(".")
        value = getattr(getattr(recipe, section), key)
        if not ok(value):
            fail(f"{path} must be {expected}, got {value!r}")

    t, s = recipe.trainer, recipe.scheduler
    try:
        total = total_steps(s, t.max_steps)
        warmup = warmup_steps(s, t.max_steps)
    except AsrflowError as e:
        fail(str(e))
    if warmup >= total:
        fail(
            f"scheduler.warmup ({s.warmup} = {warmup} steps) >= trainer.max_steps ({total}): "
            "training would end before the warmup does; shorten the warmup or train longer"
        )

    if not recipe.criteria:
        fail("best_model_criterion is empty; give at least one [monitor, top_k, mode]")
    seen = set()
    for i, c in enumerate(recipe.criteria):
        where = f"best_model_criterion[{i}] ({c.monitor})"
        if not c.monitor:
            fail(f"{where}: the monitor is empty; name a logged metric such as valid/loss")
        if c.monitor in seen:
            fail(f"{where}: {c.monitor} is listed twice; merge the entries")
        seen.add(c.monitor)
        if c.top_k < 1:
            fail(f"{where}: top_k must be >= 1, got {c.top_k}")
        if c.mode not in MODES:
            fail(f"{where}: mode must be min or max, got {c.mode!r}")


def _check_model(
    model: Mapping[str, Any], loss: LossConfig, fail: Callable[[str], NoReturn]
) -> None:
    for key, use in ESPNET_SUPERSEDED_KEYS.items():
        if key in model:
            fail(
                f"{key} is an ESPnet training key that asrflow does not use; remove it (use {use})"
            )
    if not isinstance(model.get("encoder"), str) or not model["encoder"]:
        fail("encoder is missing: name an ESPnet encoder (e.g. encoder: conformer)")
    problem = component_problem(model)
    if problem:
        fail(problem)
    for key, value in model.items():
        if key.endswith("_conf") and value is not None and not isinstance(value, Mapping):
            fail(f"{key} must be a mapping of ESPnet settings, got {value!r}")
    model_conf = model.get("model_conf") or {}
    if not isinstance(model_conf, Mapping):
        fail(f"model_conf must be a mapping of ESPnet settings, got {model_conf!r}")
    ctc_weight = model_conf.get("ctc_weight", 0.5)  # ESPnetASRModel's default
    if isinstance(ctc_weight, bool) or not isinstance(ctc_weight, int | float):
        fail(f"model_conf.ctc_weight must be a number in [0, 1], got {ctc_weight!r}")
    if ctc_weight < 1.0 and not model.get("decoder"):
        fail(
            f"model_conf.ctc_weight is {ctc_weight} (< 1) but no decoder is given: set "
            "ctc_weight: 1.0 for CTC only, or add a decoder (e.g. decoder: transformer)"
        )
    if loss.normalization == "token" and model_conf.get("length_normalized_loss"):
        fail(
            "loss.normalization is token but model_conf.length_normalized_loss is true: the "
            "attention loss would be divided by the token count twice; set one of them off"
        )


def component_problem(model: Mapping[str, Any], key_prefix: str = "") -> str | None:
    """What is wrong with the first ESPnet component name of ``model`` (``encoder``,
    ``decoder``, ...) that ESPnet's ``ASRTask`` does not know (:data:`ESPNET_CHOICES`), naming
    the key, the close matches and the valid names; None when all are known."""
    for key, names in ESPNET_CHOICES.items():
        value = model.get(key)
        if value is None or (isinstance(value, str) and value in names):
            continue
        if not isinstance(value, str):
            return f"{key_prefix}{key} must be the name of an ESPnet {key}, got {value!r}"
        close = difflib.get_close_matches(value.lower(), names, n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        return (
            f"{key_prefix}{key}: ESPnet has no {key} named {value!r}{guess}; its {key} names are "
            f"{', '.join(names)}"
        )
    return None


def check_overrides(overrides: Mapping[str, Any], run: str) -> None:
    """Check ``runs.<run>.overrides`` on its own: asrflow's keys known and typed, each single
    setting in range, ESPnet's component names known. An error names the override's key
    (``runs.<run>.overrides.trainer.max_steps``), not the recipe file; how overridden settings
    fit with the recipe's is checked with the merged recipe (:func:`check_recipe`)."""
    prefix = f"runs.{run}.overrides."
    source = f"run {run}"
    recipe = recipe_from_dict(overrides, source, key_prefix=prefix)
    for path, (ok, expected) in _RANGES.items():
        section, key = path.split(".")
        if key not in (overrides.get(section) or {}):
            continue
        value = getattr(getattr(recipe, section), key)
        if not ok(value):
            raise AsrflowError(f"{source}: {prefix}{path} must be {expected}, got {value!r}")
    problem = component_problem(overrides, prefix)
    if problem:
        raise AsrflowError(f"{source}: {problem}")
