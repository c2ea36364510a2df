"""Training batches read from Lhotse Shar shards (``corpora.<c>.shards``; the shards are written
by :mod:`asrflow.data.shards`).

**How an epoch is drawn.** In epoch ``e`` the shards of the run's train corpora (with
``weights``, the epoch's weighted mix of them: :func:`mix_shards`) are put in an order shuffled
with ``(batching.seed, e)``, the same on every rank, and dealt out: shard ``i``
to rank ``i mod world_size``, and a rank's ``j``-th shard to its loader worker
``j mod num_workers``. Each worker reads its shards front to back and batches their cuts with
its own ``DynamicBucketingSampler`` (the run's batching settings, duration bins fixed from the
whole split's durations, a shuffle buffer of ``batching.buffer_size`` cuts, seeded by seed,
epoch, rank and worker). So in an epoch every cut is read exactly once in all, by one worker of
one rank, and shuffling is a shard order plus a buffer, not a permutation of the whole split:
cuts of one shard stay near each other in time (smaller shards mix better).

**Ranks end their epoch together.** Ranks hold different shards, so they can have different
numbers of batches. :class:`ShardLoader` makes every rank take as many steps as the rank with
the most: before each step the ranks sum whether they still have a batch (one all-reduce of an
integer), a rank that has run out takes a *filler* (its previous batch again, marked
``filler``: the module trains on it with weight zero, so it adds no loss, no tokens and no
gradient), and the epoch ends when no rank has a batch. The per-token loss normalisation
counts real tokens only, so a filler leaves the update as it would be without it.

**Resume** is exact: a rank's stream is a pure function of the seed, the epoch, the rank, the
world size and the number of workers (the DataLoader takes its workers' batches in turn), so a
resumed run replays its epoch and drops the batches it already trained on. Unlike the per-file
path it reads their audio to do so (the shards are read front to back; there is no index to
jump with): a resume late in a long epoch first spends that part of the epoch's loading time.
The number of workers and the shard size are therefore part of a sharded run's identity
(:data:`asrflow.recipe.sections.SHARD_DEALING_KEYS`,
:func:`asrflow.train.run.workdir.run_identity`):
changing either starts the run anew. A world size changed under it (the recipe's devices and
nodes count too) deals the shards differently; the epoch is then only approximately where it
stopped (the module warns).
"""

from __future__ import annotations

import functools
import logging
import random
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from lhotse import CutSet
from lhotse.dataset import DynamicBucketingSampler
from lhotse.lazy import LazyFlattener, LazyMapper
from lhotse.shar.readers.lazy import LazySharIterator
from torch.utils.data import IterableDataset, get_worker_info

from asrflow.data.shards import shard_fields
from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.train.batches.loader import EAGER_WARNING, AsrDataset, pass_order
from asrflow.train.batches.workers import worker_loader
from asrflow.train.spec import RunSpec

log = logging.getLogger(__name__)

FILLER = "filler"
"""Key of a batch that a rank trains on with weight zero (it has no batch of its own left)."""


def deal(shards: Sequence[Any], seed: int, epoch: int, world_size: int, rank: int) -> list[Any]:
    """The shards rank ``rank`` reads in epoch ``epoch``: a seeded shuffle, then every
    ``world_size``-th shard from ``rank`` on."""
    order = list(shards)
    random.Random(f"{seed}/{epoch}").shuffle(order)
    return order[rank::world_size]


def mix_shards(
    corpora: Sequence[Sequence[dict[str, Any]]], weights: Sequence[float], epoch: int, seed: int
) -> list[dict[str, Any]]:
    """Epoch ``epoch``'s shards of several sharded corpora mixed by ``weights`` (``runs.<run>.
    weights``), as :func:`asrflow.train.batches.loader.mix_epoch` mixes cuts, at the grain of a
    shard.

    An epoch holds about as many cuts as all corpora together, ``N``; corpus ``i`` gives whole
    shards until it has given ``round(N * w_i / sum(w))`` cuts (at least one shard). Each corpus
    is read as an endless stream of passes over its shards, each pass a new seeded permutation,
    and epoch ``e`` takes the next shards of that stream: a small corpus weighted up repeats
    shards within the epoch, a large one weighted down gives other shards each epoch. A shard's
    second, third... occurrence in the epoch carries ``repeat`` 1, 2...: its cut IDs get
    ``_rep<k>`` appended when read, so IDs stay unique (as mix_epoch does).
    """
    if len(corpora) != len(weights):
        raise AsrflowError(
            f"mix: {len(corpora)} sharded corpora but {len(weights)} weights; give one weight "
            "per corpus"
        )
    total = sum(s["num_cuts"] for shards in corpora for s in shards)
    picked: list[dict[str, Any]] = []
    for i, (shards, weight) in enumerate(zip(corpora, weights, strict=True)):
        want = max(1, round(total * float(weight) / float(sum(weights))))
        position, orders = 0, {}  # each pass's permutation, drawn once
        for e in range(epoch + 1):
            taken, got = [], 0
            while got < want:
                npass, k = divmod(position, len(shards))
                if npass not in orders:
                    orders[npass] = pass_order(len(shards), seed, i, npass)
                shard = shards[orders[npass][k]]
                taken.append(shard)
                got += shard["num_cuts"]
                position += 1
            if e == epoch:
                picked += taken
    seen: dict[str, int] = {}
    out = []
    for shard in picked:
        out.append({**shard, "repeat": seen.get(shard["cuts"], 0)})
        seen[shard["cuts"]] = seen.get(shard["cuts"], 0) + 1
    return out


def run_shards(spec: RunSpec) -> tuple[list[list[dict[str, Any]]], list[float] | None]:
    """A sharded run's corpora as :class:`ShardBatches` takes them, and the weights that mix
    them (None for one corpus, as :func:`asrflow.train.batches.loader.mix_epoch` is not used
    then)."""
    if len(spec.train_shards) != len(spec.train_cuts):
        raise AsrflowError(
            f"run {spec.name}: {len(spec.train_shards)} of its {len(spec.train_cuts)} train "
            "corpora are sharded; shard all of them (corpora.<corpus>.shards) or none"
        )
    corpora = [shard_fields(path) for path in spec.train_shards]
    weights = spec.train_weights if len(corpora) > 1 else None
    return corpora, None if weights is None else list(weights)


class ShardBatches(IterableDataset):
    """The batches of one rank in one epoch, each worker reading its share of the shards.

    ``corpora``: each train corpus's shards as Lhotse Shar fields (``{"cuts": path,
    "recording": path, "num_cuts": n}``, :func:`asrflow.data.shards.shard_fields`);
    ``duration_bins``: the bucket edges (the same for every worker and rank, from the whole
    split); ``speed_perturb``: factors, each cut yielded once per factor (1.0: as it is);
    ``max_cuts``: read only that many cuts in all (the smoke run); ``dataset`` turns a batch
    of cuts into tensors (None: only :meth:`epoch_batches` is used, as the batch audit does).
    Without ``weights`` an epoch reads every shard of every corpus once; with them, the
    corpora's shards are mixed anew every epoch by :func:`mix_shards`.
    """

    def __init__(
        self,
        corpora: Sequence[Sequence[dict[str, Any]]],
        dataset: AsrDataset | None,
        batching: Batching,
        duration_bins: Sequence[float],
        *,
        world_size: int = 1,
        rank: int = 0,
        speed_perturb: Sequence[float] = (),
        max_cuts: int | None = None,
        weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        if batching.sampler != "bucketing":
            raise AsrflowError(
                f"batching.sampler: {batching.sampler} sorts the whole train set, which a sharded "
                "corpus streams and never holds at once; use batching.sampler: bucketing (the "
                "default) with sharded corpora"
            )
        self.corpora = [list(shards) for shards in corpora]
        self.weights = None if weights is None else list(weights)
        self.dataset = dataset
        self.batching = batching
        self.duration_bins = list(duration_bins)
        self.world_size, self.rank = world_size, rank
        self.speed_perturb = list(speed_perturb)
        self.max_cuts = max_cuts
        self.epoch = 0
        count = len(self.epoch_shards())
        if count < world_size:
            raise AsrflowError(
                f"{count} train shard(s) for {world_size} ranks: every rank "
                "needs a shard of its own; lower corpora.<corpus>.shards.shard_size so that "
                "there are at least as many shards as ranks (better: several per loader worker)"
            )

    def epoch_shards(self) -> list[dict[str, Any]]:
        """This epoch's shards, of every rank (the weighted mix of the corpora, with weights)."""
        if self.weights is None:
            return [shard for shards in self.corpora for shard in shards]
        return mix_shards(self.corpora, self.weights, self.epoch, self.batching.seed)

    def worker_shards(self, worker: int, num_workers: int) -> list[dict[str, Any]]:
        """The shards worker ``worker`` of ``num_workers`` of this rank reads this epoch."""
        shards = self.epoch_shards()
        mine = deal(shards, self.batching.seed, self.epoch, self.world_size, self.rank)
        return mine[worker::num_workers]

    def cuts(self, worker: int = 0, num_workers: int = 1, *, audio: bool = True) -> CutSet:
        """The (lazy) cuts a worker reads this epoch, each once per speed factor; no audio is
        read until they are iterated (none at all without ``audio``: the cut files only).
        With ``max_cuts``, a worker reads its share of them."""
        shards = self.worker_shards(worker, num_workers)
        if not shards:
            return CutSet()
        fields = {k: [s[k] for s in shards] for k in ("cuts", "recording") if audio or k == "cuts"}
        renames = [
            functools.partial(_renamed, suffix=f"_rep{s['repeat']}") if s.get("repeat") else None
            for s in shards
        ]
        cuts = CutSet(LazySharIterator(fields=fields, cut_map_fns=renames))
        if self.max_cuts is not None:
            cuts = cuts.subset(first=-(-self.max_cuts // num_workers))
        if self.speed_perturb:
            perturb = functools.partial(_perturbed, factors=tuple(self.speed_perturb))
            cuts = CutSet(LazyFlattener(LazyMapper(cuts, perturb)))
        return cuts

    def sampler(
        self, worker: int = 0, num_workers: int = 1, *, audio: bool = True
    ) -> DynamicBucketingSampler:
        """The bucketing sampler of a worker for this epoch (the run's batching settings; its
        buckets hold ``batching.buffer_size`` cuts, which is also the shuffle's reach)."""
        kwargs = self.batching.sampler_kwargs()
        kwargs["seed"] = _seed(self.batching.seed, self.epoch, self.rank, worker)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=EAGER_WARNING)  # an empty worker's CutSet
            sampler = DynamicBucketingSampler(
                self.cuts(worker, num_workers, audio=audio),
                **kwargs,
                duration_bins=self.duration_bins,
                world_size=1,
                rank=0,
            )
        sampler.set_epoch(self.epoch)
        return sampler

    def epoch_batches(self, num_workers: int = 1) -> Iterator[CutSet]:
        """This rank's batches of cuts for the epoch, as its loader takes them from
        ``num_workers`` workers in turn, without audio (the batch audit)."""
        streams = [iter(self.sampler(w, max(1, num_workers), audio=False)) for w in
                   range(max(1, num_workers))]  # fmt: skip
        while streams:
            for stream in list(streams):
                batch = next(stream, None)
                if batch is None:
                    streams.remove(stream)
                else:
                    yield batch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for cuts in self.sampler(worker, num_workers):
            yield self.dataset[cuts]


def _renamed(cut: Any, suffix: str) -> Any:
    """A cut of a repeated shard, its ID made unique in the epoch."""
    return cut.with_id(cut.id + suffix)


def _perturbed(cut: Any, factors: tuple[float, ...]) -> list[Any]:
    """A cut once per speed factor, as :func:`asrflow.train.batches.loader.speed_perturb` makes
    them."""
    return [cut if f == 1.0 else cut.perturb_speed(f, affix_id=True) for f in factors]


def _seed(seed: int, epoch: int, rank: int, worker: int) -> int:
    return (((seed * 1_000_003 + epoch) * 1_000_003 + rank) * 1_000_003 + worker) % 2**31


class ShardLoader:
    """What the Trainer iterates for a sharded run: a DataLoader over :class:`ShardBatches`
    whose ranks end every epoch together (see the module), able to skip the batches a resumed
    run already trained on. The module calls :meth:`set_epoch` (Lightning's sampler hook does
    not reach an iterable dataset) and sets :attr:`skip`."""

    def __init__(self, batches: ShardBatches, num_workers: int = 0, worker_nice: int = 0) -> None:
        self.batches = batches
        self.loader = worker_loader(batches, num_workers, worker_nice=worker_nice)
        self.skip = 0
        self.world_size, self.rank = batches.world_size, batches.rank
        self.sampler = self  # the sharding this loader was built for (the module checks it)

    def set_epoch(self, epoch: int) -> None:
        self.batches.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        skip, self.skip = self.skip, 0
        previous: dict[str, Any] | None = None
        for n, batch in enumerate(_even(iter(self.loader), self.world_size)):
            if batch is None:  # this rank has run out while another has not
                if previous is None:
                    raise AsrflowError(
                        f"rank {self.rank} has no train batch at all this epoch while another "
                        "rank has: lower corpora.<corpus>.shards.shard_size"
                    )
                batch = {**previous, FILLER: True}
            else:
                previous = batch
            if n < skip:
                continue
            if n == skip and skip:
                log.info("resume: skipped %d batch(es) already trained on in this epoch", skip)
            yield batch


def _even(batches: Iterator[dict[str, Any]], world_size: int) -> Iterator[dict[str, Any] | None]:
    """``batches``, then None (a filler's place) until every rank has run out."""
    while True:
        batch = next(batches, None)
        if world_size > 1 and dist.is_available() and dist.is_initialized():
            flag = torch.tensor([int(batch is not None)], dtype=torch.int64, device=_device())
            dist.all_reduce(flag, op=dist.ReduceOp.SUM)
            if int(flag.item()) == 0:
                return
        elif batch is None:
            return
        yield batch


def _device() -> torch.device:
    """Where a collective's tensor must live: the current GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
