"""What a fine-tuning run trains: LoRA adapters (``runs.<run>.init.adapter``) and frozen
parameters (``init.freeze``), after its start weights are loaded.

After the start weights are loaded (:func:`asrflow.train.init.weights.apply_init`), ESPnet's
``create_adapter`` (``espnet2.layers.create_adapter``, LoRA through ``loralib``) puts a
low-rank pair ``A`` (rank x in), ``B`` (out x rank, zero at the start) beside every linear layer
whose name ends with one of ``targets`` (ESPnet's ``target_modules`` semantics: ``linear_q``
adapts every attention query projection, ``encoder.encoders.0.self_attn.linear_q`` one of
them); the layer computes ``x W^T + scaling * x A^T B^T`` with ``scaling = alpha / rank`` (Hu et
al. 2021). Everything else is frozen, except the layers that start fresh (a new vocabulary's
output layers, ``init.exclude``): they have nothing to adapt from.

Two departures from ESPnet's defaults, both so that a checkpoint always means the same model:
loralib merges ``B @ A`` into ``W`` when a layer goes to eval mode and takes it out again in
train mode, so a checkpoint written during validation and one written during training would hold
different ``W`` for the same model; here ``merge_weights`` is off and ``W`` stays the start
weight. And each adapted layer keeps its ``scaling`` as a buffer (``lora_scaling``), so that
:func:`asrflow.checkpoints.merge_lora` can merge any checkpoint on its own: averaging and export
read merged, plain ESPnet weights.

Example (``config.yaml``)::

    runs:
      week2_lora:
        corpora: [week2]
        init: {run: base, adapter: {rank: 8, alpha: 16, targets: [linear_q, linear_v]}}
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asrflow.checkpoints import LORA_KEYS
from asrflow.errors import AsrflowError
from asrflow.espnet_import import espnet_import

if TYPE_CHECKING:
    import torch

# torch is imported where it is used: asrflow.train.init.weights imports this module, and it stays
# cheap to import (asrflow.checkpoints says why)

log = logging.getLogger(__name__)

ADAPTER_KEYS = ("type", "rank", "alpha", "dropout", "targets")
"""The keys of ``init.adapter`` (the schema fills their defaults)."""


@dataclass(frozen=True)
class AdapterConfig:
    """``runs.<run>.init.adapter`` of a validated config."""

    type: str
    rank: int
    alpha: int
    dropout: float
    targets: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AdapterConfig:
        missing = [k for k in ADAPTER_KEYS if k not in d]
        unknown = sorted(set(d) - set(ADAPTER_KEYS))
        if missing or unknown:
            raise AsrflowError(
                f"init.adapter: {', '.join(missing)} missing, {', '.join(unknown) or 'none'} "
                "unknown; pass it as the schema check leaves it (asrflow.settings.with_defaults)"
            )
        return cls(
            type=str(d["type"]),
            rank=int(d["rank"]),
            alpha=int(d["alpha"]),
            dropout=float(d["dropout"]),
            targets=tuple(d["targets"]),
        )


def _targets(model: torch.nn.Module, targets: Sequence[str]) -> list[str]:
    """The module names ``targets`` select (ESPnet's rule: the name ends with one), each
    checked to be a ``torch.nn.Linear`` (the one layer type whose merge asrflow does)."""
    import torch  # the module stays cheap to import (the note under its imports)

    chosen = [n for n, _ in model.named_modules() if n and any(n.endswith(t) for t in targets)]
    if not chosen:
        linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        kinds = sorted({n.rsplit(".", 1)[-1] for n in linear})
        raise AsrflowError(
            f"init.adapter.targets {list(targets)} name no module of the run's model; its "
            f"linear layers end with {', '.join(kinds)}"
        )
    other = [n for n in chosen if type(model.get_submodule(n)) is not torch.nn.Linear]
    if other:
        kind = type(model.get_submodule(other[0])).__name__
        raise AsrflowError(
            f"init.adapter.targets select {other[0]!r} ({kind}; {len(other)} such module(s)): "
            "LoRA adapts linear layers only here; name the linear layers in targets"
        )
    return chosen


def add_adapters(
    model: torch.nn.Module, adapter: Mapping[str, Any], fresh: Collection[str] = ()
) -> dict[str, Any]:
    """Add LoRA adapters to ``model`` (in place, after its start weights are loaded) and
    freeze every parameter but theirs and the ``fresh`` ones (the keys that were not loaded:
    they have no start to adapt). Returns the record for the summary: the adapter's settings,
    ``adapted_modules`` and ``adapter_parameters``."""
    import torch  # the module stays cheap to import (the note under its imports)

    cfg = AdapterConfig.from_dict(adapter)
    if cfg.type != "lora":
        raise AsrflowError(f"init.adapter.type: {cfg.type!r}; asrflow supports lora")
    chosen = _targets(model, cfg.targets)
    with espnet_import():  # ESPnet and loralib only when a run adds adapters
        import loralib
        from espnet2.layers.create_adapter import create_adapter

    conf = {
        "rank": cfg.rank,
        "alpha": cfg.alpha,
        "dropout_rate": cfg.dropout,
        "target_modules": list(cfg.targets),
    }
    training = model.training
    create_adapter(model, "lora", conf)  # leaves the model in eval mode, B @ A (= 0) merged
    model.train(training)
    for name in chosen:
        layer = model.get_submodule(name)
        assert isinstance(layer, loralib.LoRALayer), name
        layer.merge_weights = False  # W stays the start weight in every mode
        layer.merged = False  # the merge create_adapter made added B @ A = 0
        device = layer.weight.device
        layer.register_buffer("lora_scaling", torch.tensor(float(layer.scaling), device=device))
    n_adapter = 0
    for key, param in model.named_parameters():
        own = key.rsplit(".", 1)[-1] in LORA_KEYS
        n_adapter += param.numel() if own else 0
        param.requires_grad_(own or key in fresh)
    log.info(
        "init.adapter: LoRA rank %d, alpha %d on %d linear layers (%s): %d adapter parameters",
        cfg.rank, cfg.alpha, len(chosen), ", ".join(cfg.targets), n_adapter,
    )  # fmt: skip
    return {
        "adapter": {**adapter, "targets": list(cfg.targets)},
        "adapted_modules": len(chosen),
        "adapter_parameters": n_adapter,
    }


def trainable(
    model: torch.nn.Module,
    adapter: Mapping[str, Any] | None,
    patterns: Sequence[str],
    fresh: Collection[str],
) -> dict[str, Any]:
    """Adapters (when ``adapter`` is set: :func:`add_adapters`), then :func:`freeze` of
    ``patterns``; ``fresh``: the model keys that were not loaded. The record of both."""
    record: dict[str, Any] = {"adapter": None}
    if adapter:
        record = add_adapters(model, adapter, set(fresh))
    return {**record, **freeze(model, patterns)}


def frozen(name: str, patterns: Sequence[str]) -> bool:
    """Whether parameter ``name`` is frozen by ``patterns``: one matches it (fnmatch) or is a
    module prefix of it (``encoder`` freezes ``encoder.embed.conv.0.weight``, as ESPnet's
    ``--freeze_param`` does)."""
    return any(fnmatch.fnmatchcase(name, p) or name.startswith(f"{p}.") for p in patterns)


def freeze(model: torch.nn.Module, patterns: Sequence[str]) -> dict[str, Any]:
    """Stop the gradient of the parameters ``patterns`` name (:func:`frozen`), after the start
    weights are loaded. Returns the record for the summary: ``freeze`` (the patterns),
    ``frozen_tensors``, ``frozen_parameters`` and ``trainable_parameters``. A pattern that
    matches no parameter and no module is an error listing the model's top-level modules (a
    typo would otherwise train everything); one that names a module without parameters (the
    log-mel frontend) freezes nothing."""
    named = dict(model.named_parameters())
    modules = [n for n, _ in model.named_modules() if n]
    # a module without parameters (ESPnet's log-mel frontend, utterance_mvn) has nothing to
    # freeze, but naming it is no typo
    unmatched = [
        p
        for p in patterns
        if not any(frozen(n, [p]) for n in named) and not any(frozen(m, [p]) for m in modules)
    ]
    if unmatched:
        modules = ", ".join(dict.fromkeys(n.split(".", 1)[0] for n in named))
        raise AsrflowError(
            f"init.freeze: {', '.join(map(repr, unmatched))} match(es) no parameter of the "
            f"run's model; its modules are {modules} (e.g. encoder, or encoder.encoders.0.*)"
        )
    count = 0
    for name, param in named.items():
        if frozen(name, patterns):
            param.requires_grad_(False)
            count += 1
    n_frozen = sum(p.numel() for p in named.values() if not p.requires_grad)
    n_all = sum(p.numel() for p in named.values())
    if patterns:
        log.info(
            "init.freeze %s: %d tensors (%d of %d parameters) frozen, %d trainable",
            list(patterns), count, n_frozen, n_all, n_all - n_frozen,
        )  # fmt: skip
    return {
        "freeze": list(patterns),
        "frozen_tensors": count,
        "frozen_parameters": n_frozen,
        "trainable_parameters": n_all - n_frozen,
    }
