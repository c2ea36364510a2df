"""Whose work directory is this? A run resumes only from state trained on the same inputs.

``results/work/<run>/`` outlives failed and killed jobs so that a rerun resumes from
``checkpoints/last.ckpt``. But Snakemake also reruns training when the run's *inputs* changed (a
data revision, another tokenizer, an edited recipe, other start weights), and resuming then would
continue a model trained on the old inputs while the summary records the new hashes. So the work
directory carries ``identity.json`` (:func:`run_identity`): the hashes of the train and dev data,
the tokenizer, the text normalization, the model and loss sections of the recipe and the init
spec. A run whose identity differs moves the old directory aside to ``<run>.stale-<UTC time>``
(nothing is deleted) and starts fresh; a run with the same identity resumes.

The trainer, optimizer, scheduler and batching sections are *not* part of the identity: raising
``max_steps`` (or changing the learning rate) of a finished or killed run resumes it and trains on
from its last checkpoint, as ESPnet's and NeMo's resume do; the summary records the recipe as it
is now. Start such a run from scratch by deleting (or renaming) its work directory.

Under DDP only global rank 0 (:func:`asrflow.train.cluster.launched_rank`) moves and claims the
directory; the other ranks wait until the identity file says the directory is theirs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.io import write_json

log = logging.getLogger(__name__)

IDENTITY = "identity.json"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_identity(
    hashes: Mapping[str, Any], recipe: Any, init: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What a work directory's state was trained from (see the module docstring).

    ``hashes`` is the run summary's (train/dev cuts, BPE model, token list, normalization),
    ``recipe`` a :class:`~asrflow.train.recipe.Recipe`.
    """
    import hashlib

    canonical = json.dumps(
        {"model": recipe.model, "loss": recipe.to_dict().get("loss")}, sort_keys=True, default=str
    )
    keep = ("train_cuts", "dev_cuts", "bpe_model", "tokens", "normalization")
    return {
        **{k: hashes.get(k) for k in keep},
        "model": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        "init": dict(init) if init else None,
    }


def claim_work_dir(
    work: Path,
    identity: Mapping[str, Any],
    *,
    rank: int = 0,
    timeout: float = 600.0,
) -> Path | None:
    """Make ``work`` the directory of the run ``identity`` describes; returns where stale state
    was moved, if any. A directory with checkpoints but no identity file (written before this
    check existed) is treated as stale as well."""
    identity = json.loads(json.dumps(identity, sort_keys=True, default=str))
    path = work / IDENTITY
    if rank != 0:
        deadline = time.monotonic() + timeout
        while _read(path) != identity:
            if time.monotonic() > deadline:
                raise AsrflowError(
                    f"{path}: rank {rank} waited {timeout:.0f} s for rank 0 to claim the work "
                    "directory; is rank 0 running?"
                )
            time.sleep(0.5)
        return None
    moved = None
    current = _read(path)
    has_state = work.is_dir() and any(work.iterdir())
    if has_state and current != identity:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        moved = work.with_name(f"{work.name}.stale-{stamp}")
        os.replace(work, moved)
        log.warning(
            "%s holds a run trained from other inputs (%s); moved it to %s and starting fresh "
            "instead of resuming from it",
            work,
            _difference(current, identity),
            moved,
        )
    work.mkdir(parents=True, exist_ok=True)
    write_json(path, identity)
    return moved


def _difference(old: Any, new: Mapping[str, Any]) -> str:
    if not isinstance(old, Mapping):
        return f"no readable {IDENTITY}"
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return "changed: " + ", ".join(changed)
