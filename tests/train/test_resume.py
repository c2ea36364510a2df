"""The resume wrapper over real Lhotse samplers, alone and sharded over ranks."""

from __future__ import annotations

import pytest

from asrflow.train.data import make_sampler
from asrflow.train.resume import SkippingSampler
from tests.train.test_data import fake_cuts, ids_of

SETTINGS = {"max_duration": 10.0, "num_buckets": 3, "seed": 7}


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_skipping_continues_each_ranks_epoch_where_it_stopped(world_size: int):
    cuts = fake_cuts(120)
    for rank in range(world_size):
        full = ids_of(make_sampler(cuts, SETTINGS, world_size=world_size, rank=rank))
        assert len(full) > 4
        resumed = SkippingSampler(make_sampler(cuts, SETTINGS, world_size=world_size, rank=rank))
        resumed.skip = 3
        assert ids_of(resumed) == full[3:]
        assert ids_of(resumed) == full  # the skip applies to one epoch only


def test_sharded_epoch_covers_every_cut_once():
    cuts = fake_cuts(120)
    shards = [ids_of(make_sampler(cuts, SETTINGS, world_size=2, rank=r)) for r in range(2)]
    assert len(shards[0]) == len(shards[1])  # equal steps on every rank, or DDP hangs
    seen = [c for shard in shards for batch in shard for c in batch]
    assert sorted(seen) == sorted(cuts.ids)
