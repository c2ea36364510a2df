"""DataLoader workers that start from a fork server, not as forks of the training process.

Every asrflow loader with workers (the train loader of :mod:`asrflow.train.data`, the
:class:`~asrflow.train.shards.ShardLoader` of a sharded run) is made by :func:`worker_loader`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

WORKER_PRELOAD = ("asrflow.train.data", "asrflow.train.shards")
"""What the fork server imports once, so that each worker it forks starts in milliseconds."""


def worker_loader(dataset: Any, num_workers: int, **kwargs: Any) -> DataLoader:
    """A DataLoader of whole batches (``batch_size=None``) whose workers start from a fork
    server, not as forks of the training process.

    Measured by ``bench/worker_start.py`` (demo recipe, 2 CPU cores, fp32, forward + backward
    + AdamW on the same batches, three runs): while a *forked* child process of the trainer
    exists, even one that sleeps, each step takes 12-21 % longer (the forward most: 36 -> 40-48
    ms; why is not pinned down: the fork leaves the trainer's memory shared copy-on-write with
    the child); with a worker from a fork server (``multiprocessing``'s ``forkserver``: a fresh
    interpreter that has imported only :data:`WORKER_PRELOAD`) the loop is 7-11 % slower than
    on preloaded batches (the worker's loading competing for the 2 cores), against 17-25 % with
    a forked one.

    A process that Python starts this way imports the parent's ``__main__`` first (for the
    train rule: its Snakemake script, whose top-level code would train again in every worker);
    :class:`WorkerLoader` starts its workers with ``__main__`` unnamed, as for ``python -c``.
    So a dataset must be an importable object, as asrflow's are. The fork server starts once
    per process and lives as long.
    """
    context = None
    if num_workers > 0:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(WORKER_PRELOAD))
    return WorkerLoader(
        dataset,
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context=context,
        **kwargs,
    )


class WorkerLoader(DataLoader):
    """A DataLoader whose worker processes do not import ``__main__`` (see
    :func:`worker_loader`)."""

    def __iter__(self) -> Any:
        if self.num_workers == 0:
            return super().__iter__()
        with _main_unnamed():  # workers start (or, persistent, restart nothing) in here
            return super().__iter__()


@contextlib.contextmanager
def _main_unnamed() -> Iterator[None]:
    """``__main__`` without a file or module name while the block runs: a process started
    then by ``multiprocessing`` (``spawn``, ``forkserver``) skips importing it."""
    main = sys.modules["__main__"]
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)
