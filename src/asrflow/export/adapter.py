"""Adapter-only export: what a fine-tuning run changed of its start weights, and the start
weights' hash, beside the merged package.

A run with ``init.adapter`` (LoRA) changes a small part of its start model: the adapted linear
layers by a low-rank update, and whatever else trained (new output layers, a BatchNorm's running
statistics). Its package's ``model.pth`` is merged (plain ESPnet weights, what ``Speech2Text``
and every evaluation load); ``adapter.pth`` beside it holds only the difference from the start
weights, so a team that keeps one base model and many adaptations stores each adaptation in a
fraction of the space (the sizes are in ``package.json``'s ``adapter`` record):

- a tensor equal to the base's (every frozen one) is left out;
- a changed matrix whose change has low rank (a LoRA update: rank ``r`` for one checkpoint, at
  most ``k * r`` for an average of ``k``) is stored as two factors, ``up`` (out x rank) and
  ``down`` (rank x in), found by an SVD of the change; singular values below float32 rounding
  of the weight (:data:`ROUNDING`) are rounding, not change;
- any other changed tensor, or one the base lacks, is stored whole.

:func:`merge_adapter` rebuilds the merged weights from a base ``model.pth`` whose SHA-256 must be
the one recorded (``base_model_sha256``). The rebuilt weights equal the package's ``model.pth``
up to float32 rounding: the export measures the largest difference (``max_abs_error``) and
refuses to write an adapter that is further off (:data:`TOLERANCE`).

Example (the base is the package the run started from)::

    state = merge_adapter("results/runs/lora/export/last", "results/runs/base/selected/model.pth")
    torch.save(state, "model.pth")   # with the package's config.yaml: a plain ESPnet package
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from asrflow.checkpoints import read_model_state
from asrflow.errors import AsrflowError
from asrflow.export.find import PACKAGE_ADAPTER, PACKAGE_MANIFEST
from asrflow.hashing import sha256_file
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

ADAPTER = PACKAGE_ADAPTER
FORMAT = "asrflow.adapter/1"
UP, DOWN = ".delta_up", ".delta_down"

ROUNDING = 1e-7
"""Singular values of a change below ``ROUNDING * ||W||_F`` are taken as rounding: float32 keeps
about 7 significant digits (unit roundoff 6e-8), so merging ``W + B @ A`` in float64 and storing
float32 moves every entry by up to that relative amount, a full-rank change of that size."""

TOLERANCE = 1e-5
"""Largest difference allowed between the rebuilt and the merged weights, relative to the
largest magnitude of the tensor (a few float32 rounding steps)."""


def difference(
    weights: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The tensors of ``weights`` that differ from ``base``: a low-rank change as its two factors
    (``<key>.delta_up``, ``<key>.delta_down``), anything else whole under its own key."""
    out: dict[str, torch.Tensor] = {}
    for key, w in weights.items():
        b = base.get(key)
        same_kind = b is not None and b.shape == w.shape and b.dtype == w.dtype
        if same_kind and torch.equal(b, w):
            continue
        if same_kind and w.is_floating_point() and w.ndim == 2:
            factors = _low_rank(w.double() - b.double(), float(torch.linalg.norm(w.double())))
            if factors is None:  # within rounding: the base's tensor
                continue
            if factors is not False:
                out[key + UP], out[key + DOWN] = factors
                continue
        out[key] = w
    return out


def _low_rank(delta: torch.Tensor, norm: float) -> tuple[torch.Tensor, torch.Tensor] | bool | None:
    """``(up, down)`` with ``up @ down`` = ``delta`` above rounding; None when all of ``delta``
    is rounding; False when its rank is too high for factors to be smaller than the matrix."""
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    rank = int((s > ROUNDING * norm).sum())
    if rank == 0:
        return None
    rows, cols = delta.shape
    if rank * (rows + cols) >= rows * cols:
        return False
    return (u[:, :rank] * s[:rank]).float().contiguous(), vh[:rank].float().contiguous()


def apply_difference(
    base: Mapping[str, torch.Tensor], diff: Mapping[str, torch.Tensor], keys: list[str]
) -> dict[str, torch.Tensor]:
    """The weights ``keys`` (in that order) rebuilt from ``base`` and a :func:`difference`."""
    out: dict[str, torch.Tensor] = {}
    for key in keys:
        if key in diff:
            out[key] = diff[key]
        elif key + UP in diff:
            b = base[key]
            change = diff[key + UP].double() @ diff[key + DOWN].double()
            out[key] = (b.double() + change).to(b.dtype)
        elif key in base:
            out[key] = base[key]
        else:
            raise AsrflowError(
                f"the adapter has no {key!r} and the base model lacks it too: the base is not the "
                "model this adapter was made from"
            )
    return out


def write_adapter(
    directory: Path, weights: Mapping[str, torch.Tensor], base_model: Pathlike
) -> dict[str, Any]:
    """Write :data:`ADAPTER` into ``directory`` (a package being assembled) for the merged
    ``weights`` of a run that started from ``base_model`` (a ``model.pth``); returns the
    record for ``package.json``, after checking that the file rebuilds ``weights``."""
    base, _ = read_model_state(base_model)
    diff = difference(weights, base)
    keys = list(weights)
    torch.save({"format": FORMAT, "keys": keys, "tensors": diff}, directory / ADAPTER)
    stored = torch.load(directory / ADAPTER, map_location="cpu", weights_only=True)
    rebuilt = apply_difference(base, stored["tensors"], stored["keys"])
    error = _max_error(rebuilt, weights)
    if error > TOLERANCE:
        raise AsrflowError(
            f"the adapter written for {directory.name} rebuilds the merged weights only to "
            f"{error:.2e} (relative; allowed {TOLERANCE:.0e}): a bug, please report it"
        )
    low_rank = sum(k.endswith(UP) for k in diff)
    record = {
        "file": ADAPTER,
        "sha256": sha256_file(directory / ADAPTER),
        "base_model": str(base_model),
        "base_model_sha256": sha256_file(base_model),
        "low_rank_tensors": low_rank,
        "whole_tensors": len(diff) - 2 * low_rank,
        "stored_parameters": sum(t.numel() for t in diff.values()),
        "bytes": (directory / ADAPTER).stat().st_size,
        "max_abs_error": error,
    }
    log.info(
        "adapter-only export: %d low-rank and %d whole tensors, %s bytes (base %s)",
        record["low_rank_tensors"], record["whole_tensors"], f"{record['bytes']:,}",
        record["base_model_sha256"][:12],
    )  # fmt: skip
    return record


def merge_adapter(package_dir: Pathlike, base_model: Pathlike) -> dict[str, torch.Tensor]:
    """The merged weights of an adapter-only export: ``package_dir``'s :data:`ADAPTER` applied to
    ``base_model``, which must be the start weights it was made from (same SHA-256)."""
    package = Path(package_dir)
    manifest = _read_manifest(package / PACKAGE_MANIFEST)
    record = manifest.get("adapter")
    if not record:
        raise AsrflowError(
            f"{package}: its {PACKAGE_MANIFEST} records no adapter (the run trained no "
            "init.adapter); its model.pth is the whole model"
        )
    path = package / record["file"]
    if not path.is_file():
        raise AsrflowError(f"{package}: {record['file']} is missing; re-export the package")
    if sha256_file(path) != record["sha256"]:
        raise AsrflowError(f"{path}: its SHA-256 differs from {PACKAGE_MANIFEST}; re-export it")
    found = sha256_file(base_model)
    if found != record["base_model_sha256"]:
        raise AsrflowError(
            f"{base_model}: SHA-256 {found[:12]}..., but {package}'s adapter was made from "
            f"{record['base_model_sha256'][:12]}... ({record['base_model']}); pass that model.pth"
        )
    stored = torch.load(path, map_location="cpu", weights_only=True)
    return apply_difference(read_model_state(base_model)[0], stored["tensors"], stored["keys"])


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AsrflowError(f"{path}: not a readable package manifest ({exc})") from exc


def _max_error(rebuilt: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor]) -> float:
    """The largest difference between two state dicts, each tensor's relative to its largest
    magnitude (0 for integer tensors that match; inf where a key or shape differs)."""
    worst = 0.0
    for key, w in weights.items():
        r = rebuilt.get(key)
        if r is None or r.shape != w.shape:
            return float("inf")
        if not w.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(r, w) else float("inf"))
            continue
        if w.numel() == 0:
            continue
        scale = float(w.abs().max()) or 1.0
        worst = max(worst, float((r.double() - w.double()).abs().max()) / scale)
    return worst
