"""The names of a run's checkpoints and artifacts, spelt once (torch-free: the DAG is built from
them).

A run exports these artifacts (:func:`artifact_names`), each evaluated and compared:

- ``baseline``: the start weights of a fine-tuning run (its ``init``), before any step;
- ``last``: the last checkpoint (``checkpoints/last.ckpt``);
- ``<monitor>.best``: the best checkpoint by each validation criterion, e.g. ``valid.loss.best``;
- ``<monitor>.ave_<k>best``: the average of its ``k`` best checkpoints (ESPnet's own naming),
  e.g. ``valid.loss.ave_3best``.

Top-k checkpoint files are ``checkpoints/<monitor>.step<step:07d>.ckpt``
(:func:`checkpoint_pattern`, :func:`step_of`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from asrflow.types import Pathlike

CHECKPOINTS = "checkpoints"
"""The folder of a run's checkpoints (in its work directory and its ``artifacts``)."""
LAST_CHECKPOINT = "last.ckpt"
"""The checkpoint a rerun resumes from, and the ``last`` artifact's weights."""
BASELINE = "baseline"
LAST = "last"
BEST = "best"
AVERAGE_RE = re.compile(r"\.ave_(\d+)best$")


class Criterion(Protocol):
    """What naming needs of a recipe's checkpoint criterion (``train.sections.Criterion``)."""

    monitor: str
    top_k: int


def checkpoint_tag(monitor: str) -> str:
    """File-name form of a monitor: ``valid/loss`` -> ``valid.loss``."""
    return monitor.replace("/", ".")


def checkpoint_pattern(monitor: str) -> str:
    """Lightning ``ModelCheckpoint`` file name (without ``.ckpt``) of the top-k checkpoints by
    ``monitor``: ``valid.loss.step{step:07d}``."""
    return f"{checkpoint_tag(monitor)}.step{{step:07d}}"


def step_of(checkpoint: Pathlike) -> int | None:
    """The optimizer step in a top-k checkpoint's name (``valid.loss.step0001250.ckpt`` ->
    1250); ``None`` for a name without one (``last.ckpt``)."""
    m = re.search(r"\.step(\d+)\.ckpt$", Path(checkpoint).name)
    return int(m.group(1)) if m else None


def best_name(monitor: str) -> str:
    """The artifact of the best checkpoint by ``monitor``: ``valid.loss.best``."""
    return f"{checkpoint_tag(monitor)}.{BEST}"


def average_name(monitor: str, k: int) -> str:
    """File stem of the average of the ``k`` best checkpoints by ``monitor``.

    ESPnet3's convention (``AverageCheckpointsCallback``: ``f"{monitor.replace('/', '.')}"
    f".ave_{k}best.pth"``, as ESPnet2's ``{phase}.{criterion}.ave_{n}best.pth``), without the
    ``.pth``: ``average_name("valid/loss", 3) == "valid.loss.ave_3best"``. ``/`` becomes ``.``
    exactly as in the checkpoint file names (:func:`checkpoint_tag`).
    """
    if not monitor:
        raise ValueError("monitor must be a non-empty name such as 'valid/loss'")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return f"{checkpoint_tag(monitor)}.ave_{k}best"


def is_average(artifact: str) -> bool:
    """Whether an artifact is an average of checkpoints (``valid.loss.ave_3best``)."""
    return AVERAGE_RE.search(artifact) is not None


def artifact_names(criteria: Sequence[Criterion], baseline: bool = False) -> list[str]:
    """Every artifact a run exports: [baseline], last, the best and the average of each
    criterion."""
    names = [BASELINE, LAST] if baseline else [LAST]
    for c in criteria:
        names.append(best_name(c.monitor))
        if c.top_k > 1:
            names.append(average_name(c.monitor, c.top_k))
    return names
