"""Checkpoint averaging: the mean of a run's k best checkpoints, saved as an ESPnet2 state dict.

The rule, per tensor, the same for every key (all keys are checked before anything is written):

- **floating point** (fp16, bf16, fp32, fp64, fp8): summed in float64, divided by k, rounded once
  to the tensor's own dtype. For fp32 and narrower inputs the float64 sum is exact (unless values
  at one position differ in magnitude by more than 2**29), so the result is the true mean rounded
  to the dtype: k copies of one tensor average to exactly that tensor, three fp16 30000s average
  to 30000, bf16 keeps every bit it can. (fp64 inputs come back within one ulp of their mean.)
  Complex tensors likewise, in complex128.
- **integer scalars** (counters such as BatchNorm's ``num_batches_tracked``): the largest value
  among the inputs. A counter only grows during training, so this is the count of the most-trained
  input, and it does not depend on the order the inputs are given in (best-first by score is not
  oldest-first by time, so "the last one" would mean different things to different callers).
- **bool, uint8 and non-scalar integer tensors** (masks, index tables): must be identical in every
  input and are kept as they are, dtype included; any difference is an error naming the key and the
  two files. There is no meaningful average of a mask.

Why not ESPnet's rule. ESPnet2's ``espnet2.main_funcs.average_nbest_models`` and ESPnet3's
``AverageCheckpointsCallback`` share one rule keyed on ``str(dtype).startswith("torch.int")``:

- integer tensors are *summed* (num_batches_tracked 696 + 1371 = 2067, a count of nothing);
- floats are summed in their own dtype before dividing: three fp16 30000s overflow to inf, and
  bf16 loses bits in the running sum (256 + 258 + 258 is 768 in bf16, "averaging" to 256, not 258);
- uint8 and bool are not ``torch.int*``, so they are divided and come back float32 (a bool mask
  [True, False, True] over three equal copies becomes [0.333, 0, 0.333]);
- ESPnet3 strips a ``model.`` prefix only when the keys do not already match the model; here every
  key of a Lightning ``state_dict`` must carry it (asrflow's ``AsrModule`` holds the ESPnet model as
  ``self.model``), and a plain state dict is taken as is.

Files are read by :func:`asrflow.checkpoints.load_model_state`, with
``torch.load(weights_only=True)`` only: a checkpoint that needs arbitrary unpickling is refused.
The output is written atomically and byte-reproducibly (``torch.save`` to an open file, so the
zip's inner folder name does not come from the temporary file name).

Example::

    best = topk_checkpoints(summary, "valid/loss")[:3]
    name = average_name("valid/loss", 3)  # asrflow.artifacts: "valid.loss.ave_3best"
    record = average_checkpoints(
        [ckpt_dir / f for f, _ in best], out_dir / f"{name}.pth",
        monitor="valid/loss", k=3, scores=[s for _, s in best],
    )
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from asrflow.artifacts import step_of
from asrflow.checkpoints import load_model_state
from asrflow.errors import AsrflowError, ValidationFailed
from asrflow.hashing import sha256_file
from asrflow.io import atomic_output
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

RULE = (
    "floats: float64 sum / k, rounded once to each tensor's dtype; "
    "integer scalars (counters): max over inputs; "
    "bool, uint8 and non-scalar integer tensors: must be identical, kept as is"
)
"""The averaging rule, as recorded in :func:`average_checkpoints`'s record."""

_MASK_DTYPES = frozenset({torch.bool, torch.uint8})

State = dict[str, torch.Tensor]


# --- averaging -------------------------------------------------------------------------------


def check_same_layout(states: Sequence[Mapping[str, torch.Tensor]], names: Sequence[str]) -> None:
    """Raise :class:`ValidationFailed` unless all states have the same keys, shapes and dtypes.

    The message names the first differing key and the two files (``names[0]`` and the other).
    """
    ref, ref_name = states[0], names[0]
    for state, name in zip(states[1:], names[1:], strict=True):
        for key in ref:
            if key not in state:
                raise ValidationFailed(
                    f"{name} lacks key {key!r}, which {ref_name} has; only checkpoints of one "
                    "model architecture (one run) can be averaged"
                )
        for key in state:
            if key not in ref:
                raise ValidationFailed(
                    f"{name} has key {key!r}, which {ref_name} lacks; only checkpoints of one "
                    "model architecture (one run) can be averaged"
                )
        for key, a in ref.items():
            b = state[key]
            if a.shape != b.shape:
                raise ValidationFailed(
                    f"key {key!r}: shape {tuple(a.shape)} in {ref_name} but {tuple(b.shape)} in "
                    f"{name}; only checkpoints of one model architecture can be averaged"
                )
            if a.dtype != b.dtype:
                raise ValidationFailed(
                    f"key {key!r}: dtype {a.dtype} in {ref_name} but {b.dtype} in {name}; "
                    "average checkpoints saved at one precision"
                )


def _average_tensor(key: str, tensors: Sequence[torch.Tensor], names: Sequence[str]):
    ref = tensors[0]
    if ref.is_floating_point() or ref.is_complex():
        acc_dtype = torch.complex128 if ref.is_complex() else torch.float64
        acc = ref.to(dtype=acc_dtype, copy=True)
        for t in tensors[1:]:
            acc.add_(t.to(device=acc.device, dtype=acc_dtype))
        return acc.div_(len(tensors)).to(ref.dtype)
    if ref.dtype in _MASK_DTYPES or ref.numel() != 1:
        for t, name in zip(tensors[1:], names[1:], strict=True):
            if not torch.equal(t.to(ref.device), ref):
                raise ValidationFailed(
                    f"key {key!r} ({ref.dtype}, shape {tuple(ref.shape)}) differs between "
                    f"{names[0]} and {name}; bool, uint8 and non-scalar integer tensors are "
                    "masks or indices, which cannot be averaged and must be equal in every input"
                )
        return ref.detach().clone()
    # An integer scalar: a counter. Take the largest (the most-trained input's count).
    return functools.reduce(torch.maximum, (t.to(ref.device) for t in tensors)).clone()


@torch.no_grad()
def average_state_dicts(
    states: Sequence[Mapping[str, torch.Tensor]], names: Sequence[str]
) -> State:
    """The average of ``states`` by the module's rule (see the module docstring).

    ``names`` (file names, for error messages) go with ``states`` one to one. The keys come out
    in the order of ``states[0]``; every tensor is new (nothing shares storage with the inputs).
    """
    if len(states) != len(names):
        raise ValueError(f"{len(states)} states but {len(names)} names")
    if not states:
        raise AsrflowError("no checkpoints to average")
    check_same_layout(states, names)
    out: State = {}
    counters = []
    for key, ref in states[0].items():
        tensors = [s[key] for s in states]
        out[key] = _average_tensor(key, tensors, names)
        if not (ref.is_floating_point() or ref.is_complex() or ref.dtype in _MASK_DTYPES):
            if ref.numel() == 1 and any(not torch.equal(t, ref) for t in tensors[1:]):
                counters.append(key)
    if counters:
        log.info("integer counters set to their largest value, not averaged: %s", counters)
    return out


# --- naming and choosing ---------------------------------------------------------------------


def topk_checkpoints(summary: Mapping[str, Any], monitor: str) -> list[tuple[str, float]]:
    """The kept checkpoints of a run for ``monitor``, as ``(file name, score)``, best first.

    Read from the run summary's ``criteria[monitor]``: ``top_k`` (file name -> score) sorted by
    ``mode`` (``min``: lowest first, ``max``: highest first); a NaN score sorts last, ties by
    file name (the earlier step first). File names are relative to the run's checkpoints folder.
    """
    run = summary.get("run", "?")
    criteria = summary.get("criteria")
    if not isinstance(criteria, Mapping) or not criteria:
        raise AsrflowError(
            f"run {run!r} (status {summary.get('status', '?')!r}): the summary records no kept "
            "checkpoints; only a completed training run can be averaged"
        )
    if monitor not in criteria:
        raise AsrflowError(
            f"run {run!r} kept no checkpoints by {monitor!r} (it kept them by "
            f"{sorted(criteria)}); pick one of those, or add [{monitor}, top_k, mode] to the "
            "recipe's best_model_criterion and retrain"
        )
    entry = criteria[monitor]
    mode = entry.get("mode")
    if mode not in ("min", "max"):
        raise AsrflowError(f"run {run!r}, criterion {monitor!r}: mode must be min or max: {mode!r}")
    sign = 1.0 if mode == "min" else -1.0
    items = [(str(name), float(score)) for name, score in (entry.get("top_k") or {}).items()]

    def rank(item: tuple[str, float]) -> tuple[bool, float, str]:
        name, score = item
        nan = math.isnan(score)
        return (nan, 0.0 if nan else sign * score, name)

    return sorted(items, key=rank)


# --- the whole step --------------------------------------------------------------------------


def average_checkpoints(
    paths: Sequence[Pathlike],
    out_path: Pathlike,
    *,
    monitor: str,
    k: int,
    scores: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Average the ``k`` checkpoints ``paths`` into an ESPnet state dict at ``out_path``.

    ``paths`` are the k best by ``monitor`` (best first, e.g. from :func:`topk_checkpoints`),
    ``scores`` their scores, for the record. The output (no ``model.`` prefix, loadable by
    ``model.load_state_dict``) is written atomically. Returns the record::

        {"monitor", "k", "inputs": [{"path", "sha256", "step", "score"?}], "output",
         "output_sha256", "rule"}
    """
    paths = [Path(p) for p in paths]
    if len(paths) != k:
        raise AsrflowError(
            f"asked for the average of the {k} best checkpoints by {monitor!r}, but "
            f"{len(paths)} were given ({[str(p) for p in paths]}); the run kept fewer than {k}: "
            f"average {len(paths)} (and name it so) or keep more (best_model_criterion top_k)"
        )
    if scores is not None and len(scores) != len(paths):
        raise ValueError(f"{len(paths)} paths but {len(scores)} scores")
    seen: dict[Path, Path] = {}
    for p in paths:
        real = p.resolve()
        if real in seen:
            raise AsrflowError(
                f"{p} is given twice (also as {seen[real]}); each checkpoint may count once"
            )
        seen[real] = p
    names = [str(p) for p in paths]
    log.info("averaging %d checkpoints by %s: %s", k, monitor, names)
    average = average_state_dicts([load_model_state(p) for p in paths], names)
    out = Path(out_path)
    with atomic_output(out) as tmp, open(tmp, "wb") as f:
        torch.save(average, f)
    inputs: list[dict[str, Any]] = []
    for i, p in enumerate(paths):
        item: dict[str, Any] = {"path": str(p), "sha256": sha256_file(p), "step": step_of(p)}
        if scores is not None:
            item["score"] = float(scores[i])
        inputs.append(item)
    return {
        "monitor": monitor,
        "k": k,
        "inputs": inputs,
        "output": str(out),
        "output_sha256": sha256_file(out),
        "rule": RULE,
    }
