"""Training batches from Lhotse Shar shards (asrflow.train.batches.shard_stream): every cut once
per epoch
across ranks and loader workers, ranks ending together, exact resume, a new order each epoch."""

from __future__ import annotations

import collections
import os
import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lhotse import CutSet

from asrflow.data.cuts import save_cuts
from asrflow.data.importers import import_nemo
from asrflow.data.shards import ShardSettings, shard_fields, write_shards
from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig, train_tokenizer
from asrflow.tokens import TokenEncoder
from asrflow.train.batches.loader import AsrDataset, make_sampler
from asrflow.train.batches.shard_stream import FILLER, ShardBatches, ShardLoader, deal, mix_shards
from tests.conftest import utterance_rows, write_nemo, write_wav

NORM = TextNormalization()
SPEAKERS = [f"s{i}" for i in range(6)]
BATCHING = Batching(max_duration=3.0, num_buckets=2, seed=3, buffer_size=8)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> SimpleNamespace:
    """18 train cuts (1.0-1.5 s) in 9 shards of 2, and a char tokenizer (read-only)."""
    tmp_path = tmp_path_factory.mktemp("sharded")
    rows = utterance_rows("train", SPEAKERS)
    for k, row in enumerate(rows):
        write_wav(tmp_path / row["audio_filepath"], row["duration"], seed=k)
    cuts = CutSet.from_cuts(import_nemo(write_nemo(tmp_path / "train.jsonl", rows)))
    save_cuts(cuts, tmp_path / "train.jsonl.gz")
    write_shards(tmp_path / "train.jsonl.gz", tmp_path / "shards", ShardSettings(shard_size=2))
    model, tokens = tmp_path / "bpe.model", tmp_path / "tokens.txt"
    train_tokenizer(
        tmp_path / "train.jsonl.gz", model, tokens, TokenizerConfig(model_type="char"), NORM
    )
    bins = make_sampler(cuts, BATCHING, world_size=1, rank=0).duration_bins
    return SimpleNamespace(
        ids=sorted(cuts.ids),
        shards=shard_fields(tmp_path / "shards"),
        dataset=AsrDataset(TokenEncoder(model, tokens, NORM)),
        bins=bins,
    )


def loader(sharded, rank: int, world_size: int = 2, workers: int = 2, **kwargs) -> ShardLoader:
    batches = ShardBatches(
        [sharded.shards],  # one corpus
        sharded.dataset,
        BATCHING,
        sharded.bins,
        world_size=world_size,
        rank=rank,
        **kwargs,
    )
    return ShardLoader(batches, num_workers=workers)


def epoch_ids(shard_loader: ShardLoader, epoch: int) -> list[list[str]]:
    shard_loader.set_epoch(epoch)
    return [b["ids"] for b in shard_loader if not b.get(FILLER)]


def test_every_cut_once_per_epoch_across_two_ranks_and_two_workers(sharded):
    for epoch in (0, 1):
        seen = collections.Counter()
        for rank in (0, 1):
            batches = epoch_ids(loader(sharded, rank), epoch)
            assert batches, (rank, epoch)
            seen.update(cut_id for ids in batches for cut_id in ids)
        assert sorted(seen) == sharded.ids and set(seen.values()) == {1}, seen


def test_each_rank_and_worker_reads_its_own_shards_and_the_order_changes_by_epoch(sharded):
    names = [s["cuts"] for s in sharded.shards]
    streams = {}
    for rank in (0, 1):
        b = loader(sharded, rank).batches
        for worker in (0, 1):
            streams[rank, worker] = [s["cuts"] for s in b.worker_shards(worker, 2)]
    dealt = [name for stream in streams.values() for name in stream]
    assert sorted(dealt) == sorted(names)  # each shard to exactly one worker of one rank
    assert deal(names, 3, 0, 1, 0) != deal(names, 3, 1, 1, 0)  # another shard order per epoch
    assert epoch_ids(loader(sharded, 0), 0) != epoch_ids(loader(sharded, 0), 1)
    assert epoch_ids(loader(sharded, 0), 1) == epoch_ids(loader(sharded, 0), 1)  # seeded


def test_speed_perturbation_gives_each_cut_once_per_factor(sharded):
    seen = collections.Counter()
    for rank in (0, 1):
        for ids in epoch_ids(loader(sharded, rank, speed_perturb=[0.9, 1.0, 1.1]), 0):
            seen.update(ids)
    expected = sorted(f"{c}{suffix}" for c in sharded.ids for suffix in ("_sp0.9", "", "_sp1.1"))
    assert sorted(seen) == expected and set(seen.values()) == {1}


def test_a_resumed_epoch_continues_exactly_where_it_stopped(sharded):
    full = epoch_ids(loader(sharded, 1), 1)
    resumed = loader(sharded, 1)
    resumed.skip = 3
    assert epoch_ids(resumed, 1) == full[3:]
    assert epoch_ids(resumed, 1) == full  # the skip is used once


def test_max_cuts_reads_only_that_many(sharded):
    ids = [i for b in epoch_ids(loader(sharded, 0, 1, workers=0, max_cuts=5), 0) for i in b]
    assert len(ids) == 5 and len(set(ids)) == 5


def test_fewer_shards_than_ranks_is_refused(sharded):
    with pytest.raises(AsrflowError, match=r"9 train shard.*for 10 ranks.*shard_size"):
        loader(sharded, 0, world_size=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, sharded, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        shard_loader = loader(sharded, rank, workers=0)
        shard_loader.set_epoch(0)
        out[rank] = [(list(b["ids"]), bool(b.get(FILLER))) for b in shard_loader]
    finally:
        dist.destroy_process_group()


def test_on_two_real_ranks_both_take_the_same_number_of_steps(sharded):
    """gloo ranks: the rank with fewer batches takes fillers until the other is done."""
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(_free_port(), sharded, out), nprocs=2, join=True)
        per_rank = dict(out)
    assert len(per_rank[0]) == len(per_rank[1])
    real = [[ids for ids, filler in per_rank[r] if not filler] for r in (0, 1)]
    for r in (0, 1):  # fillers only after the rank's own batches
        fillers = [filler for _, filler in per_rank[r]]
        assert fillers == sorted(fillers)
        assert real[r] == epoch_ids(loader(sharded, r, workers=0), 0)  # what it reads alone
    assert sum(f for r in (0, 1) for _, f in per_rank[r]) == abs(len(real[0]) - len(real[1]))
    assert sorted(i for r in (0, 1) for ids in real[r] for i in ids) == sharded.ids
    assert torch.distributed.is_available()


def _corpus(names: list[str], sizes: list[int]) -> list[dict]:
    return [
        {"cuts": n, "recording": n + ".tar", "num_cuts": k}
        for n, k in zip(names, sizes, strict=True)
    ]


def test_mixed_shards_keep_the_weights_per_epoch_and_rotate_the_big_corpus():
    big = _corpus([f"a{i}" for i in range(6)], [2] * 6)  # 12 cuts
    small = _corpus(["b0", "b1"], [2, 2])  # 4 cuts; N = 16
    seen_big = set()
    for epoch in range(3):
        shards = mix_shards([big, small], [1.0, 3.0], epoch, seed=0)
        by_corpus = collections.Counter(s["cuts"][0] for s in shards)
        assert by_corpus == {"a": 2, "b": 6}  # 4 of 16 cuts, 12 of 16 cuts
        seen_big |= {s["cuts"] for s in shards if s["cuts"].startswith("a")}
        for name in ("b0", "b1"):  # each small shard 3 times, numbered
            assert sorted(s["repeat"] for s in shards if s["cuts"] == name) == [0, 1, 2]
    assert seen_big == {s["cuts"] for s in big}  # every big shard once in three epochs
    assert mix_shards([big, small], [1.0, 3.0], 1, 0) == mix_shards([big, small], [1.0, 3.0], 1, 0)
    with pytest.raises(AsrflowError, match="2 sharded corpora but 1 weights"):
        mix_shards([big, small], [1.0], 0, 0)


def test_a_weighted_mix_of_two_sharded_corpora_reads_repeats_under_new_ids(sharded):
    """The same shards as two corpora, the second weighted up: every cut of an epoch has its own
    ID (repeats end in _rep<k>), and each shard's cuts come as often as the mix says."""
    first, second = sharded.shards[:6], sharded.shards[6:]  # 12 and 6 cuts
    batches = ShardBatches(
        [first, second], sharded.dataset, BATCHING, sharded.bins, weights=[1.0, 2.0]
    )
    shard_loader = ShardLoader(batches, num_workers=2)
    ids = [i for b in epoch_ids(shard_loader, 0) for i in b]
    assert len(ids) == len(set(ids))
    plan = mix_shards([first, second], [1.0, 2.0], 0, BATCHING.seed)
    assert len(ids) == sum(s["num_cuts"] for s in plan)
    assert sum(i.endswith(("_rep1", "_rep2")) for i in ids) == sum(
        s["num_cuts"] for s in plan if s["repeat"]
    )
