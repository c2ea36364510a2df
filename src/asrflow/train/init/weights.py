"""Starting a run from existing weights (fine-tuning): ``runs.<run>.init``.

The source is an exported model package (a directory with ``config.yaml`` and a ``.pth`` file, as
ESPnet's ``Speech2Text`` loads them; asrflow's ``package.json`` records the weights' SHA-256, which
is checked, and an unpacked ESPnet model-zoo package names its weights in ``meta.yaml``), an ESPnet
experiment directory (``exp/asr_*/``), a plain state-dict ``.pth`` or a Lightning checkpoint of an
earlier asrflow run. Parameter keys are chosen with fnmatch patterns::

    init:
      model: exp/asr_base/
      include: ["encoder.*", "frontend.*", "normalize.*"]
      exclude: ["ctc.*", "decoder.*"]

Every chosen key must exist in the new model with the same shape, and every model key the patterns
choose must be in the file (else it would keep its random start unnoticed); anything else is an
:class:`InitMismatch` that lists the keys (a few of each kind) with their shapes, unless left out
by the patterns. ESPnet's own loader uses ``strict=False`` and silently ignores keys that do not
match (a ``model.`` prefix left over from Lightning loads nothing and decodes garbage), so after
loading, every chosen tensor is compared with its source.

The model's files are found by :mod:`asrflow.export.find` (torch-free, for the DAG).
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from asrflow.checkpoints import load_model_state
from asrflow.errors import AsrflowError
from asrflow.export.find import (
    PACKAGE_MANIFEST,
    check_token_list,
    find_config,
    find_weights,
    package_weights,
    read_token_list,
)
from asrflow.hashing import sha256_file
from asrflow.train.init.adapters import trainable
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

OUTPUT_LAYERS = ("ctc.ctc_lo.*", "decoder.embed.*", "decoder.output_layer.*")
"""ESPnet's layers with one row per token: a run whose token list differs from its starting
model's starts them fresh (:func:`vocabulary`)."""
NEW_VOCABULARY_HOURS = 50
"""Below about this much target audio, keep the starting model's tokenizer: NVIDIA Riva's
fine-tuning guidance, which our users follow (a new output layer learns from the target data
alone)."""

INIT_KEYS = ("model", "include", "exclude", "architecture", "reuse_tokenizer", "freeze")
"""The keys of ``runs.<run>.init`` the schema fills (besides ``run``, which the config resolves
to ``model``, and ``adapter``, which has no default)."""


@dataclass(frozen=True)
class InitConfig:
    """``runs.<run>.init`` of a validated config: the schema fills in the defaults
    (:func:`asrflow.settings.with_defaults`), so that they are written down once."""

    model: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    architecture: str
    """``package`` or ``recipe``: where the model's keys came from
    (:mod:`asrflow.recipe.inherit`)."""
    reuse_tokenizer: bool
    freeze: tuple[str, ...]
    """Parameters that keep their starting values (:func:`asrflow.train.init.adapters.freeze`)."""
    adapter: Mapping[str, Any] | None
    """LoRA adapters and what they leave trainable (:mod:`asrflow.train.init.adapters`); ``None``
    when left out (the schema has no default for it)."""
    run: str | None = None
    """``init.run``: the run whose selected package ``model`` is (``None``: a path given)."""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InitConfig:
        unknown = set(d) - {*INIT_KEYS, "run", "adapter"}
        if unknown:
            raise AsrflowError(
                f"init: unknown key(s) {', '.join(sorted(unknown))}; "
                f"allowed: {', '.join(INIT_KEYS)}"
            )
        if not d.get("model"):  # required, no default
            raise AsrflowError("init: 'model' is required (a package, ESPnet model dir or .pth)")
        missing = [k for k in INIT_KEYS if k not in d]
        if missing:
            raise AsrflowError(
                f"init: {', '.join(missing)} missing; pass runs.<run>.init as the schema check "
                "leaves it, with the defaults filled in (asrflow.settings.with_defaults)"
            )
        return cls(
            model=str(d["model"]),
            include=tuple(d["include"]),
            exclude=tuple(d["exclude"]),
            architecture=str(d["architecture"]),
            reuse_tokenizer=bool(d["reuse_tokenizer"]),
            freeze=tuple(d["freeze"]),
            adapter=d.get("adapter"),
            run=d.get("run"),
        )


# --- finding the files ---------------------------------------------------------------------


# --- applying --------------------------------------------------------------------------------


def _matches(key: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def _prefixes(keys: Sequence[str]) -> str:
    """``encoder.*, ctc.*`` for a list of keys (their first components, in order)."""
    return ", ".join(dict.fromkeys(f"{k.split('.', 1)[0]}.*" for k in keys)) or "none"


def select_keys(
    state: Mapping[str, Any], include: Sequence[str], exclude: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(selected, skipped)`` keys of ``state``: matching an include and no exclude pattern."""
    selected = [k for k in state if _matches(k, include) and not _matches(k, exclude)]
    chosen = set(selected)
    return selected, [k for k in state if k not in chosen]


class InitMismatch(AsrflowError):
    """``init`` weights that do not fit the run's model: keys missing, unexpected or mis-shaped."""


MAX_LISTED = 5
"""Keys of each kind an :class:`InitMismatch` lists (then "and N more")."""


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(tensor.shape)


def _listing(items: Sequence[str]) -> str:
    more = f", and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more


def check_fit(
    state: Mapping[str, Any],
    target: Mapping[str, Any],
    selected: Sequence[str],
    cfg: InitConfig,
    weights: Path,
    overridden: Sequence[str] = (),
) -> None:
    """Raise :class:`InitMismatch` unless the ``selected`` keys of ``state`` fit ``target``.
    ``overridden``: the model keys the run's overrides set over the package's (when the model
    is the package's, ``init.architecture: package``): the error names them as the likely cause.

    Three ways not to fit, all listed (a few keys of each, with shapes): a selected key the
    model lacks; a selected key whose shape differs; a model key that the include/exclude
    patterns select but the file lacks (it would silently keep its random start).
    """
    unexpected = [k for k in selected if k not in target]
    misshaped = [k for k in selected if k in target and _shape(state[k]) != _shape(target[k])]
    missing = [
        k
        for k in target
        if k not in state and _matches(k, cfg.include) and not _matches(k, cfg.exclude)
    ]
    if not (unexpected or misshaped or missing):
        return
    problems = []
    if unexpected:
        keys = [f"{k!r} {_shape(state[k])}" for k in unexpected]
        problems.append(f"{len(unexpected)} key(s) the model lacks: {_listing(keys)}")
    if misshaped:
        keys = [f"{k!r} {_shape(state[k])} vs {_shape(target[k])}" for k in misshaped]
        problems.append(
            f"{len(misshaped)} shape mismatch(es), the file's shape vs the model's: "
            f"{_listing(keys)}"
        )
    if missing:
        keys = [f"{k!r} {_shape(target[k])}" for k in missing]
        problems.append(
            f"{len(missing)} model key(s) selected by include {list(cfg.include)} and exclude "
            f"{list(cfg.exclude)} that the file lacks: {_listing(keys)}"
        )
    differing = _prefixes([*unexpected, *misshaped, *missing])
    if cfg.architecture != "package":
        cause = "or make the recipe's model section match the one the weights were trained with"
    elif overridden:
        cause = (
            "or drop the override that changes the shape: the model is the package's, with "
            f"{', '.join(overridden)} set by the run's overrides"
        )
    else:
        cause = (
            "or give the package the config.yaml its weights were trained with: the model is "
            "built from that config"
        )
    raise InitMismatch(
        f"init: {weights} (init.model {cfg.model!r}) does not fit the run's model: "
        + "; ".join(problems)
        + f". Exclude the keys that differ in the run's init.exclude (they start with "
        f"{differing}; another vocabulary needs exclude: [ctc.*, decoder.*]) {cause}"
    )


def apply_init(
    model: torch.nn.Module,
    init_cfg: Mapping[str, Any],
    *,
    tokens: Pathlike | None = None,
    overridden: Sequence[str] = (),
) -> dict[str, Any]:
    """Load ``init_cfg``'s weights into ``model`` (in place) and return the record of it.

    ``tokens`` is the run's ``tokens.txt``, needed when ``reuse_tokenizer`` is true;
    ``overridden``: the package's model keys the run's overrides set (:func:`check_fit`). The
    record:
    ``model``, ``weights`` (the file), ``weights_sha256``, ``loaded_keys``, ``skipped_keys``
    (file keys left out by the patterns), ``fresh_keys`` (model keys not loaded), ``include``,
    ``exclude`` (with the output layers a new token list starts fresh), ``reuse_tokenizer``,
    ``vocabulary`` (:func:`vocabulary`), what trains (adapters and frozen parameters:
    :func:`asrflow.train.init.adapters.trainable`), and the lineage: ``run``
    (``init.run``) and ``package`` (:func:`_package_lineage`).
    """
    cfg = InitConfig.from_dict(init_cfg)
    weights = find_weights(cfg.model)
    if cfg.reuse_tokenizer:
        if tokens is None:
            raise AsrflowError("init.reuse_tokenizer is true but no run token list was given")
        check_token_list(cfg.model, tokens)
    digest = _checked_digest(cfg, weights)
    vocab, cfg = vocabulary(cfg, tokens)
    state = load_model_state(weights)
    selected, skipped = _select(state, cfg, weights)
    target = model.state_dict()
    check_fit(state, target, selected, cfg, weights, overridden)
    loaded = _load_selected(model, state, selected, weights)
    chosen_keys = set(selected)
    fresh = [k for k in loaded if k not in chosen_keys]
    record = {
        "model": str(cfg.model),
        "weights": str(weights),
        "weights_sha256": digest,
        "loaded_keys": len(selected),
        "skipped_keys": len(skipped),
        "fresh_keys": len(fresh),
        "include": list(cfg.include),
        "exclude": list(cfg.exclude),
        "reuse_tokenizer": cfg.reuse_tokenizer,
        # the lineage: the parent run, and what an asrflow package says it was made from
        "run": cfg.run,
        "package": _package_lineage(Path(cfg.model)),
        "vocabulary": vocab,
        **trainable(model, cfg.adapter, cfg.freeze, fresh),
    }
    numel = sum(state[k].numel() for k in selected)
    log.info(
        "init from %s (sha256 %s): loaded %d tensors (%.2f M values; %s), skipped %d of the "
        "file (%s), left %d model tensors fresh (%s)",
        weights,
        record["weights_sha256"][:12],
        len(selected),
        numel / 1e6,
        _prefixes(selected),
        len(skipped),
        _prefixes(skipped),
        len(fresh),
        _prefixes(fresh),
    )
    return record


def vocabulary(cfg: InitConfig, tokens: Pathlike | None) -> tuple[dict[str, Any], InitConfig]:
    """The run's token list against the starting model's, and ``cfg`` to load with: when they
    differ (a new tokenizer, an explicit choice: ``tokenizer: init`` keeps the model's), the
    :data:`OUTPUT_LAYERS` join ``exclude``, so that they start fresh instead of mapping the new
    tokens to the old rows (a same-sized list would load silently and decode garbage). The
    record: ``run_tokens``, ``model_tokens`` (``None``: the model carries no token list),
    ``same`` and ``output_layers`` (``loaded`` or ``fresh``)."""
    if tokens is None:
        return {}, cfg
    ours = [line for line in Path(tokens).read_text(encoding="utf-8").splitlines() if line]
    config = find_config(cfg.model)
    theirs = read_token_list(config) if config is not None else None
    record: dict[str, Any] = {"run_tokens": len(ours), "model_tokens": None, "same": None}
    if theirs is None:
        return {**record, "output_layers": "loaded"}, cfg
    record.update(model_tokens=len(theirs), same=ours == theirs)
    if record["same"]:
        return {**record, "output_layers": "loaded"}, cfg
    log.warning(
        "init: the run's token list (%d tokens) is not the starting model's (%d): its output "
        "layers (%s) start fresh. Below ~%d h of target audio keep the model's own tokenizer "
        "(runs.<run>.tokenizer: init, the default of a fine-tuning run)",
        len(ours),
        len(theirs),
        ", ".join(OUTPUT_LAYERS),
        NEW_VOCABULARY_HOURS,
    )
    extra = tuple(p for p in OUTPUT_LAYERS if not _matches(p.replace("*", "weight"), cfg.exclude))
    return {**record, "output_layers": "fresh"}, replace(cfg, exclude=cfg.exclude + extra)


def _package_lineage(model: Path) -> dict[str, Any] | None:
    """What an asrflow package's ``package.json`` records of its making: the artifact, its
    source checkpoint's SHA-256 and the provenance (data, config, code and environment hashes);
    ``None`` for another kind of model."""
    manifest = model / PACKAGE_MANIFEST
    if not manifest.is_file():
        return None
    data = json.loads(manifest.read_text(encoding="utf-8"))
    return {
        "artifact": data.get("artifact"),
        "source_sha256": (data.get("source") or {}).get("sha256"),
        "provenance": data.get("provenance"),
    }


def _checked_digest(cfg: InitConfig, weights: Path) -> str:
    """The SHA-256 of ``weights``; an error when a package records another one for them."""
    digest = sha256_file(weights)
    package = package_weights(Path(cfg.model)) if Path(cfg.model).is_dir() else None
    if package is not None and package[2] != digest:
        raise AsrflowError(
            f"{weights}: its SHA-256 differs from the one in {package[0]}; the package was "
            "modified after export, re-export it"
        )
    return digest


def _select(
    state: Mapping[str, Any], cfg: InitConfig, weights: Path
) -> tuple[list[str], list[str]]:
    """:func:`select_keys` with ``cfg``'s patterns, warning of an include pattern that matches
    nothing; an error when no key is selected."""
    selected, skipped = select_keys(state, cfg.include, cfg.exclude)
    for pattern in cfg.include:
        if not any(fnmatch.fnmatchcase(k, pattern) for k in state):
            log.warning("init: include pattern %r matches no key of %s", pattern, weights)
    if not selected:
        raise AsrflowError(
            f"init: no key of {weights} is selected by include {list(cfg.include)} and exclude "
            f"{list(cfg.exclude)}; its keys start with {_prefixes(list(state))}"
        )
    return selected, skipped


def _load_selected(
    model: torch.nn.Module, state: Mapping[str, Any], selected: Sequence[str], weights: Path
) -> dict[str, Any]:
    """Load the ``selected`` tensors of ``state`` into ``model``, check that each arrived, and
    return the model's state dict after loading."""
    chosen = {k: state[k] for k in selected}
    result = model.load_state_dict(chosen, strict=False)
    if result.unexpected_keys:  # checked above; here for safety
        raise AsrflowError(f"init: the model did not take {result.unexpected_keys[:5]}")
    loaded = model.state_dict()
    for key in selected:
        got = loaded[key]
        if not torch.equal(got.detach().cpu(), state[key].to(dtype=got.dtype)):
            raise AsrflowError(
                f"init: {key!r} from {weights} did not arrive in the model (loaded tensor differs "
                "from the file); the weights were not applied"
            )
    return loaded
