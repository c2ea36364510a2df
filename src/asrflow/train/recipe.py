"""Training recipes: an ESPnet2 model section plus asrflow's training-loop sections.

A recipe YAML holds ESPnet2's model keys at top level, unchanged (``frontend``, ``specaug``,
``normalize``, ``encoder``, ``decoder``, ``ctc_conf``, ``model_conf``, each with its ``*_conf``),
so the model part of an ESPnet2 ``asr_config.yaml`` drops in. Every top-level key that is not one
of asrflow's sections (:data:`SECTIONS`) is ESPnet's and is passed to ``ASRTask`` as is. ESPnet's
*training-loop* keys (``optim_conf``, ``max_epoch``, ``batch_bins``, ...) are refused: asrflow's
own sections replace them and they would otherwise be silently ignored
(:data:`ESPNET_SUPERSEDED_KEYS` says which section to use instead).

Units (Lightning semantics):

- ``trainer.max_steps`` counts *optimizer steps*; with ``accumulate_grad_batches = k`` each step
  consumes k batches per device. The LR scheduler is stepped per optimizer step
  (``interval: "step"``), so it ends where the trainer does (:mod:`asrflow.train.schedule`).
- ``trainer.val_check_interval`` is in optimizer steps too; Lightning counts it in *batches*, so
  :func:`asrflow.train.trainer.trainer_kwargs` multiplies it by ``accumulate_grad_batches``.
- ``batching.max_duration`` is seconds of audio per batch per device; an update sees at most
  :func:`effective_batch_seconds`.
"""

from __future__ import annotations

import copy
import logging
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import NoneType, UnionType
from typing import Any, NoReturn

import yaml

from asrflow.errors import AsrflowError
from asrflow.hashing import sha256_json
from asrflow.params import canonical
from asrflow.types import Pathlike, Seconds

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "32-true", "32", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
MODES = ("min", "max")
NORMALIZATIONS = ("token", "utterance")
"""``loss.normalization``: per target token, or per utterance (:mod:`asrflow.train.loss`)."""
OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULERS = ("warmup_cosine",)


def warmup_steps(scheduler_cfg: SchedulerConfig, max_steps: int) -> int:
    """Warmup length in optimizer steps.

    ``warmup`` is a fraction of ``max_steps`` when it is a float below 1 (rounded, at least 1
    step) or a number of steps when it is an integer >= 1. ``warmup: 0`` means 1 step (the first
    update already runs at the peak rate).
    """
    w = scheduler_cfg.warmup
    if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
        raise AsrflowError(
            f"scheduler.warmup must be a fraction in [0, 1) or a whole number of steps, got {w!r}"
        )
    if isinstance(w, float):
        if w >= 1.0:
            raise AsrflowError(
                f"scheduler.warmup ({w}) is a float >= 1; write a fraction of trainer.max_steps "
                "below 1 (e.g. 0.02) or a whole number of steps without a decimal point (e.g. 500)"
            )
        return max(1, round(w * max_steps))
    return max(1, w)


def total_steps(scheduler_cfg: SchedulerConfig, max_steps: int) -> int:
    """Steps at which the schedule reaches its end: ``trainer.max_steps`` unless given (equal)."""
    given = scheduler_cfg.total_steps
    if given is None:
        return max_steps
    if given != max_steps:
        raise AsrflowError(
            f"scheduler.total_steps ({given}) != trainer.max_steps ({max_steps}): the scheduler "
            "would not reach its end where training stops; remove scheduler.total_steps "
            "or make them equal"
        )
    return given


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


@dataclass(frozen=True)
class TrainerConfig:
    """Lightning trainer settings (``trainer:``); max_steps and val_check_interval count updates.

    ``precision: auto`` is bf16-mixed on a CUDA GPU with bf16, else 32-true
    (:func:`asrflow.train.trainer.resolve_precision`); ``allow_tf32`` is for the caller to apply
    to torch's backends.
    """

    max_steps: int = 2500
    val_check_interval: int = 250
    precision: str = "auto"
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = 5.0
    seed: int = 0
    devices: int = 1
    num_nodes: int = 1
    accelerator: str = "auto"
    allow_tf32: bool = True
    scale_lr_with_devices: bool = False


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer (``optim:``): ``name`` adamw | adam | sgd; ``momentum`` is used by sgd only."""

    name: str = "adamw"
    lr: float = 0.002
    weight_decay: float = 1.0e-6
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1.0e-8
    momentum: float = 0.0


@dataclass(frozen=True)
class SchedulerConfig:
    """LR schedule (``scheduler:``). ``warmup``: a fraction (< 1) of max_steps or steps (int).

    ``total_steps``: ``None`` means ``trainer.max_steps``; if given it must equal it.
    """

    name: str = "warmup_cosine"
    warmup: int | float = 0.02
    total_steps: int | None = None
    min_lr_ratio: float = 0.0


@dataclass(frozen=True)
class BatchingConfig:
    """Lhotse ``DynamicBucketingSampler`` settings (``batching:``); seconds per device."""

    max_duration: Seconds = 60.0
    num_buckets: int = 10
    quadratic_duration: Seconds | None = None
    shuffle: bool = True
    seed: int = 0
    num_workers: int = 1
    buffer_size: int = 10000


@dataclass(frozen=True)
class AugmentationConfig:
    """Augmentation of the train cuts (``augmentation:``); dev cuts are never augmented.

    ``speed_perturb``: speed factors, e.g. ``[0.9, 1.0, 1.1]``. The train set becomes one copy
    per factor (``1.0`` is the original), as ESPnet's ``--speed_perturb_factors`` and icefall's
    ``perturb_speed`` do: a copy is resampled when loaded, so pitch and speaking rate change
    together, its duration is divided by the factor, and an epoch holds every copy. Empty: off.
    """

    speed_perturb: tuple[float, ...] = ()


@dataclass(frozen=True)
class LossConfig:
    """Loss normalization (``loss:``): ``token`` (sum / target tokens) or ``utterance`` (ESPnet)."""

    normalization: str = "token"


@dataclass(frozen=True)
class Criterion:
    """One ``best_model_criterion`` entry: keep the ``top_k`` checkpoints by ``monitor``."""

    monitor: str
    top_k: int
    mode: str


@dataclass(frozen=True)
class DiagnosticsConfig:
    """Training diagnostics (``diagnostics:``).

    ``max_consecutive_nonfinite``: batches in a row whose loss is NaN/inf (each skipped without
    an update) after which the run stops as diverged (``failure: diverged`` in its summary).

    Loss spikes (:mod:`asrflow.train.diagnostics`): an utterance is blamed when its loss per
    token is more than ``spike_z`` robust standard deviations (log scale, median and MAD) above
    the median utterance of the last ``spike_window`` batches, at least ``spike_factor`` x that
    median, and at least ``spike_min_excess`` nats per token above it.
    """

    num_decode_utterances: int = 8
    spike_factor: float = 5.0
    spike_window: int = 50
    spike_z: float = 3.5
    spike_min_excess: float = 1.0
    blank_warning_after_warmup: bool = True
    max_consecutive_nonfinite: int = 3


DEFAULT_CRITERIA = (Criterion("valid/loss", 3, "min"), Criterion("valid/wer", 2, "min"))

_SECTION_TYPES: dict[str, type] = {
    "trainer": TrainerConfig,
    "optim": OptimConfig,
    "scheduler": SchedulerConfig,
    "batching": BatchingConfig,
    "loss": LossConfig,
    "augmentation": AugmentationConfig,
    "diagnostics": DiagnosticsConfig,
}
SECTIONS = (*_SECTION_TYPES, "best_model_criterion")
"""asrflow's own top-level keys; every other top-level key belongs to ESPnet."""


@dataclass(frozen=True)
class Recipe:
    """A whole recipe. ``model`` is the ESPnet part (a deep copy; do not mutate it)."""

    model: dict[str, Any]
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    augmentation: AugmentationConfig = field(default_factory=AugmentationConfig)
    criteria: tuple[Criterion, ...] = DEFAULT_CRITERIA
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", copy.deepcopy(dict(self.model)))
        object.__setattr__(self, "criteria", tuple(self.criteria))

    def __hash__(self) -> int:
        return hash(self.sha256())

    def to_dict(self) -> dict[str, Any]:
        """The recipe as YAML/JSON-ready data; ``recipe_from_dict(r.to_dict()) == r``."""
        d = copy.deepcopy(self.model)
        for name in _SECTION_TYPES:
            section = getattr(self, name)
            d[name] = {f.name: _plain(getattr(section, f.name)) for f in fields(section)}
        d["best_model_criterion"] = [[c.monitor, c.top_k, c.mode] for c in self.criteria]
        return d

    def sha256(self) -> str:
        """Hex SHA-256 of the canonical JSON of :meth:`to_dict` (sorted keys, compact)."""
        return sha256_json(self.to_dict())

    def identity(self) -> dict[str, Any]:
        """What the trained weights depend on: :meth:`to_dict` without
        :data:`OPERATIONAL_KEYS`, keys sorted at every level (a canonical form: comments, key
        order and number spelling of the YAML never show)."""
        return canonical(without_keys(self.to_dict(), OPERATIONAL_KEYS))

    def operational(self) -> dict[str, Any]:
        """The :data:`OPERATIONAL_KEYS` settings of this recipe, nested as in the recipe."""
        d = self.to_dict()
        out: dict[str, Any] = {}
        for path in sorted(OPERATIONAL_KEYS):
            section, key = path.split(".")
            out.setdefault(section, {})[key] = d[section][key]
        return out

    def identity_sha256(self) -> str:
        """Hex SHA-256 of :meth:`identity`: the recipe hash a run summary records."""
        return sha256_json(self.identity())


OPERATIONAL_KEYS: frozenset[str] = frozenset(
    {
        # Lhotse's sampler runs in the main process; workers only load the audio of its batches
        "batching.num_workers",
        # what the diagnostics decode, flag and warn about; never a gradient
        "diagnostics.num_decode_utterances",
        "diagnostics.spike_factor",
        "diagnostics.spike_window",
        "diagnostics.spike_z",
        "diagnostics.spike_min_excess",
        "diagnostics.blank_warning_after_warmup",
    }
)
"""The recipe keys that cannot change the trained weights, the checkpoints kept or how a run
ends: the one list. They are left out of :meth:`Recipe.identity` (the run's recipe hash, its work
directory's identity and what reruns its training), so changing one resumes a run instead of
starting it again. Every other key counts, ``trainer.max_steps`` included: the cosine schedule's
total is ``max_steps``, so a longer budget is another run (to train a finished model further,
start a new run from its export with ``runs.<run>.init``)."""


def without_keys(data: Mapping[str, Any], dotted: frozenset[str]) -> dict[str, Any]:
    """``data`` without the ``section.key`` entries named in ``dotted`` (a deep copy)."""
    out = copy.deepcopy(dict(data))
    for path in dotted:
        section, key = path.split(".")
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for every dotted key whose value differs between two recipes' data."""
    a, b = flatten(old), flatten(new)
    missing = "(unset)"
    return [
        f"{k}: {a.get(k, missing)!r} -> {b.get(k, missing)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k, missing) != b.get(k, missing)
    ]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings merge recursively, other values replace."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_recipe(
    path: Pathlike | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    source: str | None = None,
) -> Recipe:
    """Read a recipe YAML, deep-merge ``overrides`` over it, parse and :func:`check_recipe` it.

    ``path`` may also be recipe data already read (what the train rules pass: the recipe's
    :meth:`Recipe.identity` merged with its :meth:`Recipe.operational` settings).

    Example: ``load_recipe(p, {"trainer": {"max_steps": 10}, "encoder_conf": {"num_blocks": 1}})``.
    """
    if isinstance(path, Mapping):
        data: Any = path
        source = source or "recipe"
    else:
        data = read_recipe_yaml(path)
        source = source or str(path)
    if overrides:
        data = deep_merge(data, overrides)
    recipe = recipe_from_dict(data, source=source)
    check_recipe(recipe, source=source)
    return recipe


def read_recipe_yaml(path: Pathlike) -> Mapping[str, Any]:
    """The data of a recipe YAML (a mapping), or an :class:`AsrflowError` naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise AsrflowError(f"cannot read recipe {path}: {e.strerror}; check the path") from None
    except yaml.YAMLError as e:
        raise AsrflowError(f"recipe {path} is not valid YAML: {e}") from None
    if not isinstance(data, Mapping):
        raise AsrflowError(
            f"recipe {path}: expected a mapping of ESPnet and asrflow keys, got "
            f"{type(data).__name__}"
        )
    return data


AUDIT_SECTIONS = ("batching", "loss", "augmentation")
"""What the batch audit reads of a recipe (its sampler, the loss normalization it warns about,
the speed-perturbed copies it samples): the only sections that rerun it."""


def recipe_sections(data: Mapping[str, Any], sections: Sequence[str]) -> Recipe:
    """A :class:`Recipe` of only ``sections`` of ``data`` (the others at their defaults, no
    model; not checked: for a step that reads a few sections of a recipe checked elsewhere)."""
    return recipe_from_dict({k: v for k, v in data.items() if k in sections}, source="recipe")


def recipe_from_dict(data: Mapping[str, Any], source: str = "recipe") -> Recipe:
    """Parse recipe data (types and keys only; :func:`check_recipe` checks values)."""
    model = {k: v for k, v in data.items() if k not in SECTIONS}
    sections = {
        name: _parse_section(cls, name, data.get(name), source)
        for name, cls in _SECTION_TYPES.items()
    }
    criteria = _parse_criteria(data.get("best_model_criterion", _UNSET), source)
    return Recipe(model=model, criteria=criteria, **sections)


_UNSET: Any = object()


def _parse_section(cls: type, name: str, raw: Any, source: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        hint = ""
        if name in ("optim", "scheduler") and isinstance(raw, str):
            hint = (
                f"; {name}: {raw} is ESPnet's syntax, write {name}: {{name: ..., ...}} instead "
                f"(see the recipe docs) and drop {name}_conf"
            )
        raise AsrflowError(f"{source}: {name} must be a mapping of settings, got {raw!r}{hint}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise AsrflowError(
            f"{source}: unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}; "
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
                f"{source}: {name}.{key} must be {_describe(hints[key])}, got {value!r}"
            ) from None
    return cls(**values)


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


def _parse_criteria(raw: Any, source: str) -> tuple[Criterion, ...]:
    if raw is _UNSET:
        return DEFAULT_CRITERIA
    if not isinstance(raw, list):
        raise AsrflowError(
            f"{source}: best_model_criterion must be a list of [monitor, top_k, mode], got {raw!r}"
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
                f"{source}: best_model_criterion[{i}] = {item!r} must be [monitor, top_k, mode], "
                "e.g. [valid/loss, 3, min] (ESPnet2's [valid, loss, min] and ESPnet3's "
                "[valid/acc, max, 10] orders are not accepted)"
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
    "scheduler.name": (lambda v: v in SCHEDULERS, f"one of {', '.join(SCHEDULERS)}"),
    "scheduler.min_lr_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "batching.max_duration": (lambda v: v > 0, "> 0 seconds"),
    "batching.quadratic_duration": (lambda v: v is None or v > 0, "> 0 seconds or null"),
    "batching.num_buckets": _POSITIVE_INT,
    "batching.buffer_size": _POSITIVE_INT,
    "batching.num_workers": _NON_NEGATIVE,
    "batching.seed": _NON_NEGATIVE,
    "loss.normalization": (lambda v: v in NORMALIZATIONS, f"one of {', '.join(NORMALIZATIONS)}"),
    "augmentation.speed_perturb": (
        lambda v: all(0.5 <= f <= 2.0 for f in v) and len(set(v)) == len(v),
        "distinct speed factors in [0.5, 2.0] (e.g. [0.9, 1.0, 1.1]), or [] for none",
    ),
    "diagnostics.num_decode_utterances": _NON_NEGATIVE,
    "diagnostics.spike_factor": (lambda v: v > 1, "> 1"),
    "diagnostics.spike_window": _POSITIVE_INT,
    "diagnostics.spike_z": (lambda v: v > 0, "> 0"),
    "diagnostics.spike_min_excess": _NON_NEGATIVE,
    "diagnostics.max_consecutive_nonfinite": _POSITIVE_INT,
}
"""Range checks of single settings; cross-checks are in :func:`check_recipe`."""


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


def effective_batch_seconds(recipe: Recipe) -> Seconds:
    """Most audio per optimizer step: max_duration x devices x num_nodes x accumulation."""
    t = recipe.trainer
    return recipe.batching.max_duration * t.devices * t.num_nodes * t.accumulate_grad_batches


def scaled_lr(recipe: Recipe) -> float:
    """Peak LR: ``optim.lr`` x devices x num_nodes if ``scale_lr_with_devices``, else as given."""
    t = recipe.trainer
    return recipe.optim.lr * (t.devices * t.num_nodes if t.scale_lr_with_devices else 1)


def update_budget(recipe: Recipe) -> dict[str, Any]:
    """What the recipe's training run amounts to, in updates and audio."""
    t = recipe.trainer
    per_step = effective_batch_seconds(recipe)
    return {
        "optimizer_steps": t.max_steps,
        "warmup_steps": warmup_steps(recipe.scheduler, t.max_steps),
        "batches_per_device": t.max_steps * t.accumulate_grad_batches,
        "effective_batch_seconds": per_step,
        "max_audio_seconds": per_step * t.max_steps,
        "peak_lr": scaled_lr(recipe),
    }
