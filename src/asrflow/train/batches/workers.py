"""DataLoader workers that start from a fork server, not as forks of the training process, run
at a lower CPU priority than the trainer, and hand small tensors back as bytes.

Every asrflow loader with workers (the train loader of :mod:`asrflow.train.batches.loader`, the
:class:`~asrflow.train.batches.shard_stream.ShardLoader` of a sharded run) is made by
:func:`worker_loader`.

Priority (``batching.worker_nice``, default 19): on a machine with no core to spare (the demo's
2 cores, 2 torch threads) a worker that loads at the trainer's priority takes a core from the
step's threads; at the lowest it loads in the time the trainer leaves a core idle.
``bench/worker_start.py`` (demo recipe, AMD EPYC, 2 cores, clean clone of 68a897f, 6 rounds):
the median forward 0.0561 s on preloaded batches, 0.0671 s beside a worker at nice 0, 0.0605 s
at nice 19; the whole step 1.085x against 1.065x the preloaded one. The priority only orders
this job's own processes where the job's cores are its own (a SLURM job's cgroup); on a node
shared without such limits, other users' processes come first, so set 0 there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_convert

from asrflow.recipe.batching import check_worker_nice

WORKER_PRELOAD = ("asrflow.train.batches.loader", "asrflow.train.batches.shard_stream")
"""What the fork server imports once, so that each worker it forks starts in milliseconds."""


def worker_loader(
    dataset: Any, num_workers: int, *, worker_nice: int = 0, **kwargs: Any
) -> DataLoader:
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
    if num_workers > 0:
        kwargs.setdefault("collate_fn", packed_convert)
    loader = WorkerLoader(
        dataset,
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context=context,
        **kwargs,
    )
    WorkerStart(worker_nice)  # checked now, not in the first worker
    loader.worker_nice = worker_nice
    return loader


class WorkerLoader(DataLoader):
    """A DataLoader whose worker processes do not import ``__main__`` (see
    :func:`worker_loader`), and whose iterators take from torch's global random generator once
    in the loader's life, however many workers it has.

    Each new DataLoader iterator draws its workers' base seed from the global generator
    (``loader.generator`` is ``None``). With persistent workers that happens once, at the first
    epoch; in the trainer (``num_workers: 0``), or with workers that restart every epoch (the
    sharded loader's), at every epoch and every validation, which moves the generator and with
    it every dropout mask drawn on the CPU after it: the demo trained to other weights with 0
    workers than with 1 (dev loss 4.71 against 4.73 at step 300). So every iterator after the
    first gives the generator's state back, and in the per-file path ``batching.num_workers``
    cannot change the weights (tested), as :data:`asrflow.recipe.sections.OPERATIONAL_KEYS` says.
    The dev loader (always in the trainer) drew at every validation before too, so a run
    trained before this change (bd5feb1) and the same run after it part after a validation
    (the demo: the one at step 600).
    """

    worker_nice: int = 0
    _iterated: bool = False

    def __iter__(self) -> Any:
        if not self._iterated:  # the one draw, where PyTorch's persistent workers make it
            self._iterated = True
            return self._iterator_of_batches()
        state = torch.random.get_rng_state()
        try:
            return self._iterator_of_batches()
        finally:
            torch.random.set_rng_state(state)

    def _iterator_of_batches(self) -> Any:
        if self.num_workers == 0:
            return super().__iter__()
        inner = self.worker_init_fn
        if self.worker_nice:
            self.worker_init_fn = WorkerStart(self.worker_nice, inner)
        try:
            with _main_unnamed():  # workers start (or, persistent, restart nothing) in here
                batches = super().__iter__()
        finally:
            self.worker_init_fn = inner
        return map(unpack, batches)


class WorkerStart:
    """A worker's ``worker_init_fn``: its CPU priority lowered by ``nice`` (``os.nice``), then
    ``then`` (the loader's own ``worker_init_fn``, such as Lightning's worker seeding)."""

    def __init__(self, nice: int, then: Any = None) -> None:
        check_worker_nice(nice)
        self.nice, self.then = nice, then

    def __call__(self, worker_id: int) -> None:
        if self.nice:
            os.nice(self.nice)
        if self.then is not None:
            self.then(worker_id)


SMALL_TENSOR_BYTES = 64 * 1024
"""Tensors up to this size cross from a worker as plain bytes (:func:`packed_convert`)."""


class Packed:
    """A small tensor's data on its way from a worker to the trainer, as a NumPy array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Any, ...]:
        return (Packed, (self.array,))


def packed_convert(batch: Any) -> Any:
    """What a worker hands back: the batch as ``default_convert`` leaves it (the collation of
    ``batch_size=None``), each tensor of at most :data:`SMALL_TENSOR_BYTES` as :class:`Packed`.

    PyTorch sends every tensor a worker returns through shared memory, one segment and one
    file-descriptor hand-over per tensor; a hand-over costs ~0.5 ms of the trainer's time (a
    socket connection with an authentication handshake, ``multiprocessing.resource_sharer``),
    so the three small tensors of an asrflow batch (lengths and token IDs) cost more than its
    audio. Pickled as bytes they cost microseconds; :func:`unpack` turns them back into tensors.
    """
    return _pack(default_convert(batch))


def _pack(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        small = value.numel() * value.element_size() <= SMALL_TENSOR_BYTES
        if small and value.layout == torch.strided and not value.requires_grad:
            try:
                return Packed(value.numpy())
            except TypeError:  # no NumPy dtype (bfloat16): as a tensor
                return value
        return value
    if isinstance(value, dict):
        return {k: _pack(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and type(value) in (list, tuple):
        return type(value)(_pack(v) for v in value)
    return value


def unpack(value: Any) -> Any:
    """A batch from :func:`packed_convert` with its tensors back (sharing the arrays' memory)."""
    if isinstance(value, Packed):
        return torch.from_numpy(value.array)
    if isinstance(value, dict):
        return {k: unpack(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and type(value) in (list, tuple):
        return type(value)(unpack(v) for v in value)
    return value


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
