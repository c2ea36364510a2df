"""Exact mid-epoch resume of the training data order.

Lhotse samplers are iterated in the main process (the DataLoader's workers only load the cuts
of a batch), so the order of batches depends only on the sampler's seed and epoch. On resume the
wrapper replays the epoch's order and drops the batches the interrupted run already trained on,
so the run continues where it stopped instead of re-reading the same data. No audio is loaded
while skipping.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


class SkippingSampler:
    """Wraps a Lhotse sampler; ``skip`` batches are dropped at the start of the next epoch.

    The count to skip is the number of batches the *training loop* consumed (kept by
    :class:`~asrflow.train.module.AsrModule` in its checkpoints), not the number the sampler
    handed out: DataLoader workers prefetch batches that were never trained on.
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        skip, self.skip = self.skip, 0
        iterator = iter(self.sampler)
        for _ in range(skip):
            if next(iterator, None) is None:
                break
        if skip:
            log.info("resume: skipped %d batch(es) already trained on in this epoch", skip)
        yield from iterator
