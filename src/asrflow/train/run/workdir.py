"""Whose work directory is this? A run resumes only from state trained exactly as it now says.

``results/work/<run>/`` outlives failed and killed jobs so that a rerun resumes from
``checkpoints/last.ckpt``. But Snakemake also reruns training when what it trains from changed
(a data revision, another tokenizer, an edited recipe, other start weights), and resuming then
would continue (or, for a finished run, merely re-describe) weights trained another way while
the summary records the new hashes. So the work directory carries ``identity.json``
(:func:`run_identity`): the hashes of the train and dev data, the tokenizer and the text
normalization, the init spec, the corpus weights, and every recipe setting that can change the
weights (:meth:`~asrflow.recipe.sections.Recipe.identity`: model, loss, optimizer, scheduler,
``trainer.max_steps``, batching, augmentation, seeds, precision, devices, checkpoint criteria).
A run whose identity differs moves the old directory aside to ``<run>.stale-<UTC time>``
(nothing is deleted), logs which keys changed, and starts fresh; a run with the same identity
resumes. The few recipe keys that cannot change the weights
(:data:`~asrflow.recipe.sections.OPERATIONAL_KEYS`: loader workers, diagnostics) are not part of
it, except on a run trained from shards, where the loader workers deal the shards and the shard
size groups the cuts: both are part of a sharded run's identity.

Under DDP only global rank 0 (:func:`asrflow.ranks.launched_rank`) moves and claims the
directory; the other ranks wait until the identity file says the directory is theirs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.io import write_json
from asrflow.params import changed_keys

log = logging.getLogger(__name__)

IDENTITY = "identity.json"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_identity(
    hashes: Mapping[str, Any],
    recipe: Any,
    init: Mapping[str, Any] | None,
    weights: Sequence[float] | None = None,
    shard_sizes: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """What a work directory's state was trained from (see the module docstring).

    ``hashes`` is the run summary's (train/dev cuts, BPE model, token list, normalization),
    ``recipe`` a :class:`~asrflow.recipe.sections.Recipe`, ``weights`` the run's corpus weights.
    ``shard_sizes``: a sharded run's ``shard_size`` per shard directory (``shards.json``).
    Which cuts share a shard, and so a sharded run's batches, follow from the train cuts and
    the shard size; the audio format does not change a sample, so re-writing the shards as
    ``wav`` instead of ``flac`` resumes. A sharded run's recipe identity counts its loader
    workers (:data:`~asrflow.recipe.sections.SHARD_DEALING_KEYS`). A run from per-file corpora
    has neither, and its identity is what it was before shards existed.
    """
    keep = ("train_cuts", "dev_cuts", "bpe_model", "tokens", "normalization")
    identity = {
        **{k: hashes.get(k) for k in keep},
        "recipe": recipe.identity(sharded=bool(shard_sizes)),
        "init": dict(init) if init else None,
        "weights": list(weights) if weights is not None else None,
    }
    if shard_sizes:
        identity["shard_sizes"] = dict(shard_sizes)
    return identity


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
        n = 1
        while moved.exists():  # two changes within a second
            moved, n = work.with_name(f"{work.name}.stale-{stamp}-{n}"), n + 1
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
    """Which identity entries differ, recipe settings named one by one with both values."""
    if not isinstance(old, Mapping):
        return f"no readable {IDENTITY}"
    changed = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        a, b = old.get(key), new.get(key)
        if key == "recipe" and isinstance(a, Mapping) and isinstance(b, Mapping):
            changed += [f"recipe {c}" for c in changed_keys(a, b)]
        else:
            changed.append(key)
    return "changed: " + "; ".join(changed)
