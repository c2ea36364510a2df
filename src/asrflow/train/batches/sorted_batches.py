"""Length-sorted batches (``batching.sampler: sorted``), ESPnet2's ``numel`` batching.

ESPnet2 sorts the whole train set by length, cuts it into batches of at most ``batch_bins``
and shuffles the order of the batches (not their contents) every epoch. Every batch then holds
utterances of nearly one length, so it pads less than Lhotse's duration buckets (whose
batches mix the lengths of a bucket); in exchange a batch always holds the same utterances.

:class:`SortedBatchSampler` does the same with a recipe's ``batching`` settings: cuts sorted by
duration (ties by ID), packed in that order into batches of at most ``max_duration`` seconds
(a cut counting ``d + d**2 / quadratic_duration`` where that is set, as in Lhotse), the batch
order drawn from ``seed`` and the epoch when ``shuffle`` is on. Under data parallelism rank
``r`` of ``n`` takes every ``n``-th batch of that order, and every rank as many (the last
``len(batches) % n`` of the order are dropped). A cut longer than ``max_duration`` is a batch
of its own. It is a sampler as the trainer uses Lhotse's (``set_epoch``, iteration yields
``CutSet`` batches, ``world_size``/``rank``); it has no duration bins.

Example::

    sampler = SortedBatchSampler(cuts, Batching(max_duration=200, sampler="sorted"))
    sampler.set_epoch(3)
    for batch in sampler: ...  # CutSets, shortest to longest in a shuffled order
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from lhotse import CutSet
from lhotse.dataset.sampling.base import CutSampler

from asrflow.recipe.batching import Batching
from asrflow.types import Seconds


def weighted(duration: Seconds, quadratic: Seconds | None) -> float:
    """What a cut of ``duration`` counts against ``max_duration``.

    >>> weighted(10.0, None), weighted(10.0, 20.0)
    (10.0, 15.0)
    """
    return duration if quadratic is None else duration + duration**2 / quadratic


def pack_sorted(
    durations: Sequence[tuple[str, Seconds]], max_duration: Seconds, quadratic: Seconds | None
) -> list[list[str]]:
    """Cut IDs sorted by duration (then ID) and packed in order into batches whose weighted
    durations sum to at most ``max_duration`` (a longer cut alone).

    >>> pack_sorted([("a", 3.0), ("b", 1.0), ("c", 2.0), ("d", 9.0)], 4.0, None)
    [['b', 'c'], ['a'], ['d']]
    """
    batches: list[list[str]] = []
    current: list[str] = []
    total = 0.0
    for cut_id, d in sorted(durations, key=lambda x: (x[1], x[0])):
        w = weighted(d, quadratic)
        if current and total + w > max_duration:
            batches.append(current)
            current, total = [], 0.0
        current.append(cut_id)
        total += w
    if current:
        batches.append(current)
    return batches


class SortedBatchSampler:
    """Length-sorted batches in a shuffled order (module docstring)."""

    duration_bins: tuple[float, ...] = ()
    """No buckets (what the batch audit and the shard loader read of Lhotse's sampler)."""

    def __init__(
        self,
        cuts: CutSet,
        batching: Batching,
        world_size: int | None = None,
        rank: int | None = None,
    ) -> None:
        # Lhotse's own rule (arguments, then WORLD_SIZE/RANK, then torch.distributed), so that
        # both samplers shard alike; it sets self.world_size and self.rank
        CutSampler._maybe_init_distributed(self, world_size, rank)  # type: ignore[arg-type]
        self.batching = batching
        self.cuts = {c.id: c for c in cuts}
        durations = [(c.id, float(c.duration)) for c in self.cuts.values()]
        self.batches = pack_sorted(durations, batching.max_duration, batching.quadratic_duration)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> list[int]:
        """This epoch's batch indices for this rank."""
        n = len(self.batches)
        order = np.arange(n)
        if self.batching.shuffle:
            order = np.random.default_rng([self.batching.seed, self.epoch]).permutation(n)
        usable = n - n % self.world_size
        return [int(i) for i in order[:usable][self.rank :: self.world_size]]

    def __len__(self) -> int:
        return len(self.batches) // self.world_size

    def __iter__(self) -> Iterator[Any]:
        for i in self.order():
            yield CutSet.from_cuts(self.cuts[c] for c in self.batches[i])
