"""Reading the ESPnet model's weights from a checkpoint file: the one loader of asrflow.

Averaging (:mod:`asrflow.select.average`), export (:mod:`asrflow.export.package`) and
fine-tuning (:mod:`asrflow.train.init.weights`) all start from "the ESPnet model's state dict in
this file". The file is one of:

- a **Lightning checkpoint** of asrflow's ``AsrModule`` (``*.ckpt``): a mapping whose
  ``state_dict`` holds the ESPnet model as ``self.model``, so every key carries the
  :data:`LIGHTNING_PREFIX` ``model.``, which is removed. A key without it is an error (naming the
  first such key): the file was not written by asrflow's training, and guessing which keys
  belong to the model is how a checkpoint ends up half-loaded;
- **ESPnet's training** ``checkpoint.pth``: a mapping whose ``model`` entry is the state dict
  (beside ``reporter``, ``optimizers``, ``schedulers``, ...);
- a **plain state dict** ``{name: tensor}`` (an ESPnet ``*.pth``, an exported ``model.pth`` or
  an average), taken as is.

Why ``weights_only``. Files are read with ``torch.load(weights_only=True)`` and nothing else:
plain unpickling runs whatever code the file names, so a checkpoint from elsewhere could execute
arbitrary code just by being read. Tensors and plain containers are all a model's weights need;
a file that names any other global is refused with an :class:`AsrflowError` that names it, and
the global is never called.

Why the zip check. ``torch.load`` reads a tensor's bytes without checking them: a checkpoint
whose data was damaged after its header loads "fine" and gives wrong weights. ``torch.save``
writes a zip archive with a CRC-32 per member, so every file is first read whole and checked
against them (:func:`checkpoint_damage`); a file cut short (a full disk, a job killed
mid-write) has no zip directory at its end and is refused the same way, with
:class:`DamagedCheckpoint` naming it. Files in PyTorch's old, non-zip format are left to
``torch.load``.

Why LoRA is merged here. A run with ``init.adapter`` trains low-rank adapters beside frozen
linear layers (:mod:`asrflow.train.init.adapters`); its checkpoints hold, for each adapted layer,
``<layer>.weight``, ``<layer>.lora_A``, ``<layer>.lora_B`` and ``<layer>.lora_scaling``.
:func:`read_model_state` returns the model they compute, ``weight + scaling * B @ A``, as a
plain state dict (:func:`merge_lora`), so averaging averages the models (not the two factors
apart, whose product would be another model), and the export is a plain ESPnet package that
``Speech2Text`` loads.

Example::

    state, fmt = read_model_state("results/runs/r1/checkpoints/last.ckpt")   # fmt "lightning"
    model.load_state_dict(state, strict=True)
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

if TYPE_CHECKING:
    import torch

# torch is imported where it is used: asrflow.train.init.weights imports this module and must stay
# cheap to import (its find_weights runs in Snakemake input functions).

LIGHTNING_PREFIX = "model."
"""Prefix of the ESPnet model's keys in an ``AsrModule`` checkpoint's ``state_dict``
(``AsrModule`` holds the ESPnet model as ``self.model``)."""

FORMATS = ("lightning", "espnet_checkpoint", "state_dict")
"""The second result of :func:`read_model_state`: which kind of file the weights came from."""


class DamagedCheckpoint(AsrflowError):
    """A checkpoint file is missing, empty, cut short or corrupt: it must not be trusted.

    ``reason`` is what is wrong with it, without the file's name or advice.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


_REFUSED_GLOBAL = re.compile(r"GLOBAL (\S+?)\.?(?:\s|$)")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _refusal(exc: BaseException) -> str:
    """The useful part of torch's many-line ``weights_only`` refusal, on one line."""
    text = str(exc)
    found = _REFUSED_GLOBAL.search(text)
    if found:
        return f"it needs the global {found.group(1)}"
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    return _first_line(text).split(". Please", 1)[0] or type(exc).__name__


def checkpoint_damage(path: Pathlike, *, zip_required: bool = False) -> str | None:
    """Why ``path`` is not a whole ``torch.save`` file, or ``None`` when it reads back whole.

    The file must not be empty and, when it is a zip archive (what ``torch.save`` writes), every
    member must match its CRC-32. A file that is no zip archive is damaged when
    ``zip_required`` (a file torch 1.6 or later wrote, e.g. a Lightning checkpoint, is always
    one: a file cut short loses the zip directory at its end); otherwise it is left to
    ``torch.load`` (PyTorch's old format). A missing file is reported as damage too.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size == 0:
            return "the file is empty (0 bytes)"
        if not zipfile.is_zipfile(path):
            if zip_required:
                return (
                    f"it is not a whole zip archive ({size} bytes, no zip directory at its "
                    "end): the write was cut short"
                )
            return None
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except FileNotFoundError:
        return "the file does not exist"
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        return f"its zip archive cannot be read ({type(exc).__name__}: {exc})"
    if bad is not None:
        return f"member {bad!r} of its zip archive fails its CRC check: the bytes were damaged"
    return None


def _load(path: Path, *, mmap: bool = False, zip_required: bool = False) -> Any:
    import torch  # only when a file is read (the note above the module's code)

    if path.is_file():
        damage = checkpoint_damage(path, zip_required=zip_required)
        if damage is not None:
            raise DamagedCheckpoint(
                f"{path}: cannot be read as a PyTorch checkpoint ({damage}); the file is "
                "damaged or incomplete: rerun the job that wrote it",
                damage,
            )
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise AsrflowError(f"{path}: no such checkpoint file") from None
    except IsADirectoryError:
        raise AsrflowError(f"{path}: is a directory, not a checkpoint file") from None
    except pickle.UnpicklingError as exc:
        if "weights only" not in str(exc).lower():
            raise _damaged(path, exc) from None
        raise AsrflowError(
            f"{path}: refused by torch.load(weights_only=True): {_refusal(exc)}; asrflow reads "
            "only checkpoints made of tensors and plain containers, since unpickling anything "
            "else runs code named by the file: use a checkpoint written by asrflow or ESPnet, or "
            "re-save the model's state_dict() alone"
        ) from None
    except Exception as exc:  # torch reports a damaged file as any of a dozen exception types
        raise _damaged(path, exc) from None


def _damaged(path: Path, exc: BaseException) -> DamagedCheckpoint:
    kind = type(exc)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    reason = _first_line(str(exc)).split(". ", 1)[0]  # torch's advice follows the first sentence
    reason = f"{name}: {reason}" if reason else name
    return DamagedCheckpoint(
        f"{path}: cannot be read as a PyTorch checkpoint ({reason}); the file is damaged, "
        "incomplete or not a checkpoint: rerun the job that wrote it",
        f"torch.load fails ({reason})",
    )


def _checked_state(state: Mapping[Any, Any], path: Path, where: str) -> dict[str, torch.Tensor]:
    """``state`` as a dict, after checking that it is a non-empty ``{str: tensor}`` mapping."""
    import torch  # only when a file is read (the note above the module's code)

    if not state:
        raise AsrflowError(f"{path}: the {where} is empty; there are no weights in it")
    for key, value in state.items():
        if not isinstance(key, str):
            raise AsrflowError(f"{path}: key {key!r} of the {where} is not a string")
        if not isinstance(value, torch.Tensor):
            raise AsrflowError(
                f"{path}: entry {key!r} of the {where} is a {type(value).__name__}, not a "
                "tensor; a model checkpoint is a state dict of tensors, a Lightning checkpoint "
                "with a 'state_dict' or ESPnet's checkpoint.pth with a 'model' entry"
            )
    return dict(state)


def _strip_lightning_prefix(state: Mapping[Any, Any], path: Path) -> dict[str, Any]:
    """``state`` without the ``model.`` prefix, which every key must carry."""
    lacking = [k for k in state if not (isinstance(k, str) and k.startswith(LIGHTNING_PREFIX))]
    if lacking:
        raise AsrflowError(
            f"{path}: key {lacking[0]!r} of the Lightning state_dict does not start with "
            f"{LIGHTNING_PREFIX!r} ({len(lacking)} of {len(state)} keys lack it); asrflow's "
            "AsrModule holds the ESPnet model as 'self.model', so this checkpoint was not "
            "written by asrflow's training"
        )
    return {k[len(LIGHTNING_PREFIX) :]: v for k, v in state.items()}


def read_model_state(path: Pathlike) -> tuple[dict[str, torch.Tensor], str]:
    """The ESPnet model's state dict in ``path`` (on the CPU), and the kind of file it was.

    The kind is ``"lightning"`` (an ``AsrModule`` checkpoint: its ``state_dict`` with the
    ``model.`` prefix removed from every key), ``"espnet_checkpoint"`` (ESPnet's training
    ``checkpoint.pth``: its ``model`` entry) or ``"state_dict"`` (a plain state dict, as is).
    Raises :class:`AsrflowError` for a missing, damaged or refused file (see the module
    docstring), content that is not one of the three, or a state dict that is empty or holds
    anything but string keys and tensors.
    """
    path = Path(path)
    obj = _load(path)
    if not isinstance(obj, Mapping):
        raise AsrflowError(
            f"{path}: holds a {type(obj).__name__}, not a state dict, a Lightning checkpoint or "
            "ESPnet's checkpoint.pth"
        )
    if isinstance(obj.get("state_dict"), Mapping):
        lightning = obj["state_dict"]
        _checked_state(lightning, path, "Lightning state_dict")
        return merge_lora(_strip_lightning_prefix(lightning, path), path), "lightning"
    if isinstance(obj.get("model"), Mapping):
        where = "'model' entry of ESPnet's checkpoint"
        return _checked_state(obj["model"], path, where), "espnet_checkpoint"
    return _checked_state(obj, path, "state dict"), "state_dict"


LORA_KEYS = ("lora_A", "lora_B", "lora_scaling")
"""The entries of a LoRA-adapted linear layer beside its ``weight`` (:func:`merge_lora`)."""


def merge_lora(state: Mapping[str, torch.Tensor], path: Pathlike = "") -> dict[str, torch.Tensor]:
    """``state`` with every LoRA-adapted linear layer merged: ``weight + scaling * B @ A``
    (loralib's ``Linear``: ``A`` is rank x in, ``B`` out x rank), computed in float64 and
    stored in the weight's dtype, and the :data:`LORA_KEYS` entries dropped. A state without
    adapters is returned as it is."""
    prefixes = [k[: -len(".lora_A")] for k in state if k.endswith(".lora_A")]
    if not prefixes:
        return dict(state)
    out = dict(state)
    for prefix in prefixes:
        names = [f"{prefix}.{k}" for k in ("weight", *LORA_KEYS)]
        missing = [n for n in names if n not in state]
        if missing:
            raise AsrflowError(
                f"{path}: LoRA layer {prefix!r} lacks {', '.join(missing)}; the checkpoint was "
                "not written by asrflow's training with init.adapter"
            )
        weight, a, b, scaling = (state[n] for n in names)
        delta = (b.double() @ a.double()) * float(scaling)
        out[names[0]] = (weight.double() + delta).to(weight.dtype)
        for name in names[1:]:
            del out[name]
    return out


def read_training_checkpoint(path: Pathlike) -> dict[str, Any]:
    """A Lightning checkpoint that training can resume from, read whole and checked.

    Tensors are memory-mapped, so checking a large file costs little memory. Raises
    :class:`DamagedCheckpoint` naming ``path`` when it is missing, empty, cut short, fails a CRC
    check, cannot be loaded, or is no Lightning checkpoint (no ``state_dict``/``global_step``).
    """
    path = Path(path)
    if not path.is_file():
        raise DamagedCheckpoint(f"{path}: no such checkpoint file", "the file does not exist")
    try:
        obj = _load(path, mmap=True, zip_required=True)
    except DamagedCheckpoint:
        raise
    except AsrflowError as exc:
        raise DamagedCheckpoint(str(exc)) from None
    for key, kind in (("state_dict", Mapping), ("global_step", int)):
        if not isinstance(obj, Mapping) or not isinstance(obj.get(key), kind):
            reason = f"it holds no {key!r}, so it is no Lightning training checkpoint"
            raise DamagedCheckpoint(f"{path}: {reason}", reason)
    return dict(obj)


def load_model_state(path: Pathlike) -> dict[str, torch.Tensor]:
    """The ESPnet model's state dict in ``path``: :func:`read_model_state` without the kind."""
    return read_model_state(path)[0]
