"""Batching settings: a recipe's ``batching:`` section and the sampler's arguments, one type.

Torch-free: :mod:`asrflow.recipe.load` parses a recipe's section into :class:`Batching` while
the DAG is built; :func:`asrflow.train.batches.loader.make_sampler` and the batch audit
(:mod:`asrflow.train.preflight.audit`) turn it into Lhotse's ``DynamicBucketingSampler``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.types import Seconds


@dataclass(frozen=True)
class Batching:
    """Lhotse ``DynamicBucketingSampler`` settings (``batching:``); seconds per device.

    - ``max_duration``: seconds of audio per batch (summed over its cuts, before padding);
    - ``num_buckets``: duration buckets (at least 2); more buckets, less padding, less mixing;
    - ``quadratic_duration``: when set, a cut counts as ``d + d**2 / quadratic_duration``
      seconds, which evens out memory for attention models (15-40 for transformers);
    - ``shuffle``/``seed``: reservoir shuffling, reproducible per seed and epoch;
    - ``num_workers``: DataLoader processes that load the audio of the sampler's batches (the
      sampler itself runs in the main process); not a sampler argument; on sharded corpora
      each worker batches its own share of the shards, so there it changes the batches;
    - ``worker_nice``: how much lower the workers' CPU priority is than the trainer's (0-19, as
      ``nice``); the workers then load in the time the trainer leaves a core idle instead of
      taking it from the training step (:mod:`asrflow.train.batches.workers`); not a sampler
      argument;
    - ``buffer_size``: cuts held across the buckets (memory vs shuffling quality);
    - ``drop_last``: drop incomplete batches at the end of a bucket;
    - ``sampler``: ``bucketing`` (Lhotse's ``DynamicBucketingSampler``, the default) or
      ``sorted`` (ESPnet2's ``numel``: the whole train set sorted by duration, packed into
      batches, their order shuffled every epoch; :mod:`asrflow.train.batches.sorted_batches`), which
      pads less and ignores ``num_buckets``, ``buffer_size`` and ``drop_last``.

    Invalid values raise :class:`AsrflowError` naming ``batching.<key>``.
    """

    max_duration: Seconds = 60.0
    num_buckets: int = 10
    quadratic_duration: Seconds | None = None
    shuffle: bool = True
    seed: int = 0
    num_workers: int = 1
    worker_nice: int = 19
    buffer_size: int = 10000
    drop_last: bool = False
    sampler: str = "bucketing"

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise AsrflowError(
                f"batching.sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}"
            )
        if not _positive(self.max_duration):
            raise AsrflowError(
                f"batching.max_duration must be a positive number of seconds, "
                f"got {self.max_duration!r}"
            )
        if not _integer(self.num_buckets) or self.num_buckets < 2:
            raise AsrflowError(
                f"batching.num_buckets must be an integer >= 2 (Lhotse's bucketing sampler "
                f"needs two buckets), got {self.num_buckets!r}"
            )
        if self.quadratic_duration is not None and not _positive(self.quadratic_duration):
            raise AsrflowError(
                f"batching.quadratic_duration must be a positive number of seconds or null, "
                f"got {self.quadratic_duration!r}"
            )
        if not _integer(self.buffer_size) or self.buffer_size < 1:
            raise AsrflowError(
                f"batching.buffer_size must be a positive integer, got {self.buffer_size!r}"
            )
        for key in ("seed", "num_workers"):
            value = getattr(self, key)
            if not _integer(value) or value < 0:
                raise AsrflowError(f"batching.{key} must be a non-negative integer, got {value!r}")
        check_worker_nice(self.worker_nice)

    def sampler_kwargs(self) -> dict[str, Any]:
        """The ``DynamicBucketingSampler`` arguments: every setting but the workers' and the
        choice of sampler."""
        skip = LOADER_KEYS | {"sampler"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


SAMPLERS = ("bucketing", "sorted")
"""``batching.sampler``: Lhotse's duration buckets, or length-sorted batches."""

LOADER_KEYS = frozenset({"num_workers", "worker_nice"})
"""The settings of the DataLoader's workers, not of the sampler."""


def check_worker_nice(nice: Any) -> None:
    """Raise :class:`AsrflowError` unless ``nice`` is a ``batching.worker_nice`` (0-19)."""
    if not _integer(nice) or not 0 <= nice <= 19:
        raise AsrflowError(
            f"batching.worker_nice must be an integer from 0 (the trainer's priority) to 19 "
            f"(the lowest), got {nice!r}"
        )


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
