"""Length-sorted batches (batching.sampler: sorted, asrflow.train.batches.sorted_batches)."""

from __future__ import annotations

import doctest
import itertools

import pytest
from lhotse import CutSet

from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.recipe.checks import recipe_from_dict
from asrflow.train.batches import sorted_batches
from asrflow.train.batches.loader import make_sampler
from asrflow.train.batches.sorted_batches import SortedBatchSampler
from asrflow.train.loop.resume import SkippingSampler
from asrflow.train.preflight.audit import padding_share, sampled_batches
from tests.cuts import audio_less_cut


def varied_cuts(n: int = 120) -> CutSet:
    return CutSet.from_cuts(
        audio_less_cut(f"c{i:04d}", round(0.5 + ((i * 7919) % 37) * 0.25, 2)) for i in range(n)
    )


SORTED = Batching(max_duration=20.0, sampler="sorted", seed=3)


def ids(batches) -> list[list[str]]:
    return [[c.id for c in b] for b in batches]


def test_batches_are_runs_of_the_sorted_cuts_within_max_duration():
    cuts = varied_cuts()
    sampler = make_sampler(cuts, SORTED, world_size=1, rank=0)
    assert isinstance(sampler, SortedBatchSampler)
    batches = ids(sampler)
    duration = {c.id: c.duration for c in cuts}
    assert sorted(i for b in batches for i in b) == sorted(duration)  # each cut once
    assert all(sum(duration[i] for i in b) <= 20.0 for b in batches)
    # in sorted order the batches are consecutive runs: no batch's lengths interleave another's
    spans = sorted((min(duration[i] for i in b), max(duration[i] for i in b)) for b in batches)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert len(sampler) == len(batches)


def test_the_order_of_batches_changes_by_epoch_and_seed_but_not_their_contents():
    cuts = varied_cuts()
    sampler = make_sampler(cuts, SORTED, world_size=1, rank=0)
    sampler.set_epoch(0)
    first = ids(sampler)
    assert ids(sampler) == first  # reproducible
    sampler.set_epoch(1)
    second = ids(sampler)
    assert second != first and sorted(second) == sorted(first)
    other = make_sampler(cuts, Batching(**{**vars(SORTED), "seed": 4}), world_size=1, rank=0)
    assert ids(other) != first and sorted(ids(other)) == sorted(first)
    unshuffled = Batching(**{**vars(SORTED), "shuffle": False})
    plain = ids(make_sampler(cuts, unshuffled, world_size=1, rank=0))
    assert sorted(plain) == sorted(first)
    flat = [i for b in plain for i in b]
    assert flat == sorted(flat, key=lambda i: (cuts[i].duration, i))  # shortest first


def test_ranks_take_disjoint_equal_shares_and_resume_skips_batches():
    cuts = varied_cuts(121)
    ranks = [make_sampler(cuts, SORTED, world_size=2, rank=r) for r in (0, 1)]
    for s in ranks:
        s.set_epoch(5)
    a, b = ids(ranks[0]), ids(ranks[1])
    assert len(a) == len(b) and not {i for x in a for i in x} & {i for x in b for i in x}
    skipping = SkippingSampler(ranks[0])
    skipping.skip = 2
    assert ids(skipping) == a[2:]


def test_sorted_batches_pad_less_than_buckets_in_the_audit():
    cuts = varied_cuts(300)
    tokens = {c.id: 1 for c in cuts}
    bucketing = Batching(max_duration=20.0, num_buckets=4, seed=3)
    audited = {}
    for name, settings in (("bucketing", bucketing), ("sorted", SORTED)):
        batches, _, bins = sampled_batches(cuts, settings, tokens, 1)
        audited[name] = padding_share(batches)
        assert sum(b.utterances for b in batches) == 300
    assert audited["sorted"] < audited["bucketing"] / 2
    assert bins == []  # a sorted sampler has no duration buckets


def test_the_sampler_key_parses_is_checked_and_stays_out_of_the_hash_by_default():
    model = {"encoder": "conformer"}
    recipe = recipe_from_dict({**model, "batching": {"sampler": "sorted"}})
    assert recipe.batching.sampler == "sorted"
    assert recipe.to_dict()["batching"]["sampler"] == "sorted"
    assert "sampler" not in recipe_from_dict(model).to_dict()["batching"]
    assert "sampler" not in SORTED.sampler_kwargs()  # not a Lhotse argument
    with pytest.raises(AsrflowError, match=r"batching\.sampler must be one of bucketing, sorted"):
        Batching(sampler="numel")


def test_a_sharded_corpus_cannot_be_sorted():
    from asrflow.train.batches.shard_stream import ShardBatches

    with pytest.raises(AsrflowError, match="sharded corpus streams"):
        ShardBatches([["s0.tar"]], None, SORTED, [])


def test_the_examples_hold():
    assert doctest.testmod(sorted_batches).failed == 0
