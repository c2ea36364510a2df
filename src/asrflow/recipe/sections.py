"""A recipe's sections, one frozen dataclass each, and the :class:`Recipe` that holds them.

Parsing and checking recipe data is :mod:`asrflow.recipe.checks`; reading a recipe file is
:mod:`asrflow.recipe.load` (the public entry, which re-exports these names). The ``batching``
section is :class:`asrflow.recipe.batching.Batching`, the sampler's own settings.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.hashing import sha256_json
from asrflow.params import canonical
from asrflow.recipe.batching import Batching
from asrflow.recipe.mappings import without_keys

PRECISIONS = ("auto", "32-true", "32", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
MODES = ("min", "max")
NORMALIZATIONS = ("token", "utterance")
"""``loss.normalization``: per target token, or per utterance (:mod:`asrflow.train.loop.loss`)."""
OPTIMIZERS = ("adamw", "adam", "sgd")
OPTIMIZER_IMPLEMENTATIONS = ("auto", "fused", "foreach", "for_loop")
SCHEDULERS = ("warmup_cosine",)


@dataclass(frozen=True)
class TrainerConfig:
    """Lightning trainer settings (``trainer:``); max_steps and val_check_interval count updates.

    ``precision: auto`` is bf16-mixed on a CUDA GPU with bf16, else 32-true
    (:func:`asrflow.train.loop.trainer.resolve_precision`); ``allow_tf32`` is for the caller to
    apply to torch's backends.
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
    """Optimizer (``optim:``): ``name`` adamw | adam | sgd; ``momentum`` is used by sgd only.

    ``implementation``: how PyTorch's optimizer computes the update, not what it computes
    (:func:`asrflow.train.loop.schedule.implementation_kwargs`): ``auto`` (one fused kernel where
    PyTorch has one for the parameters' device), ``fused``, ``foreach`` or ``for_loop`` (a
    Python loop over the parameters: PyTorch's default on a CPU, and asrflow's before
    ``implementation`` existed, for reproducing such a run bit for bit)."""

    name: str = "adamw"
    lr: float = 0.002
    weight_decay: float = 1.0e-6
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1.0e-8
    momentum: float = 0.0
    implementation: str = "auto"


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
class AugmentationConfig:
    """Augmentation of the train cuts (``augmentation:``); dev cuts are never augmented.

    ``speed_perturb``: speed factors, e.g. ``[0.9, 1.0, 1.1]``. The train set becomes one copy
    per factor (``1.0`` is the original), as ESPnet's ``--speed_perturb_factors`` and icefall's
    ``perturb_speed`` do: a copy is resampled when loaded, so pitch and speaking rate change
    together, its duration is divided by the factor, and an epoch holds every copy. Empty: off.
    """

    speed_perturb: tuple[float, ...] = ()
    vtlp: tuple[float, ...] = ()
    """Vocal tract length perturbation: ``[low, high]``, each train utterance's log-mel
    frequency axis warped by a factor drawn from that range every time it is seen (Jaitly &
    Hinton 2013 use ``[0.9, 1.1]``; :mod:`asrflow.train.batches.vtlp`). Empty: off."""
    noise_snr: tuple[float, ...] = ()
    """White noise: ``[low, high]`` dB, each train utterance mixed with Gaussian noise at a
    signal-to-noise ratio drawn from that range every time it is seen (as ESPnet's
    ``noise_db_range`` with recorded noise; :func:`asrflow.train.batches.loader.add_noise`). Empty:
    off."""


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

    Loss spikes (:mod:`asrflow.train.loop.diagnostics`): an utterance is blamed when its loss per
    token is more than ``spike_z`` robust standard deviations (log scale, median and MAD) above
    the median utterance of the last ``spike_window`` batches, at least ``spike_factor`` x that
    median, and at least ``spike_min_excess`` nats per token above it.

    ``max_unk_share``: the most of a split's target tokens that may be ``<unk>`` (pieces the
    run's tokenizer cannot spell; :mod:`asrflow.train.preflight.unk`): the smoke run stops above
    it, for the train and the dev split, before it trains a step; below it, any is a warning.
    """

    num_decode_utterances: int = 8
    spike_factor: float = 5.0
    spike_window: int = 50
    spike_z: float = 3.5
    spike_min_excess: float = 1.0
    blank_warning_after_warmup: bool = True
    max_consecutive_nonfinite: int = 3
    max_unk_share: float = 0.001


DEFAULT_CRITERIA = (Criterion("valid/loss", 3, "min"), Criterion("valid/wer", 2, "min"))

SECTION_TYPES: dict[str, type] = {
    "trainer": TrainerConfig,
    "optim": OptimConfig,
    "scheduler": SchedulerConfig,
    "batching": Batching,
    "loss": LossConfig,
    "augmentation": AugmentationConfig,
    "diagnostics": DiagnosticsConfig,
}
SECTIONS = (*SECTION_TYPES, "best_model_criterion")
"""asrflow's own top-level keys; every other top-level key belongs to ESPnet."""


@dataclass(frozen=True)
class Recipe:
    """A whole recipe. ``model`` is the ESPnet part (a deep copy; do not mutate it)."""

    model: dict[str, Any]
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    batching: Batching = field(default_factory=Batching)
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
        """The recipe as YAML/JSON-ready data; ``recipe_from_dict(r.to_dict()) == r``.

        A key of :data:`OMITTED_AT_DEFAULT` is left out while it holds its default."""
        d = copy.deepcopy(self.model)
        for name in SECTION_TYPES:
            d[name] = _section_dict(name, getattr(self, name))
        d["best_model_criterion"] = [[c.monitor, c.top_k, c.mode] for c in self.criteria]
        return d

    def sha256(self) -> str:
        """Hex SHA-256 of the canonical JSON of :meth:`to_dict` (sorted keys, compact)."""
        return sha256_json(self.to_dict())

    def identity(self, *, sharded: bool = False) -> dict[str, Any]:
        """What the trained weights depend on: :meth:`to_dict` without the operational keys
        (:func:`operational_keys`: on a run that trains from shards, ``sharded``, the loader
        workers count), keys sorted at every level (a canonical form: comments, key order and
        number spelling of the YAML never show)."""
        return canonical(without_keys(self.to_dict(), operational_keys(sharded=sharded)))

    def operational(self, *, sharded: bool = False) -> dict[str, Any]:
        """The operational settings of this recipe (:func:`operational_keys`), nested as in
        the recipe: with :meth:`identity` of the same ``sharded``, every setting once."""
        d = self.to_dict()
        out: dict[str, Any] = {}
        for path in sorted(operational_keys(sharded=sharded)):
            section, key = path.split(".")
            out.setdefault(section, {})[key] = d[section][key]
        return out

    def identity_sha256(self, *, sharded: bool = False) -> str:
        """Hex SHA-256 of :meth:`identity`: the recipe hash a run summary records."""
        return sha256_json(self.identity(sharded=sharded))


OPERATIONAL_KEYS: frozenset[str] = frozenset(
    {
        # Lhotse's sampler runs in the main process; workers only load the audio of its batches
        # (not so on a sharded corpus: SHARD_DEALING_KEYS)
        "batching.num_workers",
        "batching.worker_nice",
        # what the diagnostics decode, flag and warn about; never a gradient
        "diagnostics.num_decode_utterances",
        "diagnostics.spike_factor",
        "diagnostics.spike_window",
        "diagnostics.spike_z",
        "diagnostics.spike_min_excess",
        "diagnostics.blank_warning_after_warmup",
        # a gate before training: it decides whether the smoke run passes, not what it writes
        "diagnostics.max_unk_share",
    }
)
"""The recipe keys that cannot change the trained weights, the checkpoints kept or how a run
ends (on per-file corpora; on sharded ones see :data:`SHARD_DEALING_KEYS`): the one list. They
are left out of :meth:`Recipe.identity` (the run's recipe hash, its work directory's identity
and what reruns its training), so changing one resumes a run instead of starting it again.
Every other key counts, ``trainer.max_steps`` included: the cosine schedule's total is
``max_steps``, so a longer budget is another run (to train a finished model further, start a
new run from its export with ``runs.<run>.init``)."""


SHARD_DEALING_KEYS: frozenset[str] = frozenset({"batching.num_workers"})
"""The :data:`OPERATIONAL_KEYS` that count on a run trained from shards: there each loader worker
reads its own share of a rank's shards and batches them with its own sampler
(:mod:`asrflow.train.batches.shard_stream`), so the number of workers changes which cuts share a
batch, and so the weights. (0 workers and 1 deal the shards alike, but count as two settings.)"""


def operational_keys(*, sharded: bool = False) -> frozenset[str]:
    """The recipe keys that cannot change the weights of a run; ``sharded``: a run whose train
    corpora are sharded (``corpora.<c>.shards``), where :data:`SHARD_DEALING_KEYS` can."""
    return OPERATIONAL_KEYS - SHARD_DEALING_KEYS if sharded else OPERATIONAL_KEYS


OMITTED_AT_DEFAULT: frozenset[str] = frozenset(
    {
        "batching.drop_last",
        "batching.sampler",
        "augmentation.vtlp",
        "augmentation.noise_snr",
        "optim.implementation",
    }
)
"""Recipe keys added after recipes were first hashed. :meth:`Recipe.to_dict` leaves each out
while it holds its default, so the recipe hash, a work directory's identity and the train rules'
params of every recipe that does not set it stay as they were: adding a setting reruns no run."""


def _section_dict(name: str, section: Any) -> dict[str, Any]:
    """One section's settings as plain data (tuples as lists), :data:`OMITTED_AT_DEFAULT` keys
    at their defaults left out."""
    out = {}
    for f in fields(section):
        value = getattr(section, f.name)
        if f"{name}.{f.name}" in OMITTED_AT_DEFAULT and value == f.default:
            continue
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


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
