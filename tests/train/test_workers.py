"""asrflow.train.batches.workers: loader workers at a lower CPU priority, small tensors sent as
bytes."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from torch.utils.data._utils.collate import default_convert

from asrflow.train.batches.workers import (
    SMALL_TENSOR_BYTES,
    Packed,
    WorkerStart,
    packed_convert,
    unpack,
    worker_loader,
)


class NiceProbe(torch.utils.data.Dataset):
    """Each item: the niceness of the process that made it, and whether the loader's own
    ``worker_init_fn`` ran there first."""

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"i": i, "nice": os.nice(0), "init_ran": int(os.environ.get(INIT_MARK, "0"))}

    def __len__(self) -> int:
        return 4


INIT_MARK = "ASRFLOW_TEST_WORKER_INIT_RAN"


def mark_init(worker_id: int) -> None:
    os.environ[INIT_MARK] = "1"


def batch_like_asrflow() -> dict:
    """A batch as :class:`asrflow.train.batches.loader.AsrDataset` makes one, and odd values
    besides."""
    g = torch.Generator().manual_seed(0)
    return {
        "speech": torch.randn(3, 48000, generator=g),  # 576 KB: stays a shared tensor
        "speech_lengths": torch.tensor([48000, 40000, 31000]),
        "text": torch.tensor([[5, 6, 7], [8, 9, -1], [4, -1, -1]]),
        "text_lengths": torch.tensor([3, 2, 1]),
        "ids": ["a", "b", "c"],
        "num_tokens": 6,
        "audio_seconds": 7.4375,
        "padding_ratio": 0.1,
        "bf16": torch.ones(4, dtype=torch.bfloat16),  # no NumPy dtype
        "mask": torch.tensor([True, False]),
        "pair": (torch.arange(3), [torch.zeros(2, 2)]),
        "strided": torch.arange(12).reshape(3, 4).t(),
    }


class Batches(torch.utils.data.Dataset):
    def __getitem__(self, i: int) -> dict:
        return {**batch_like_asrflow(), "index": i}

    def __len__(self) -> int:
        return 3


def assert_same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_small_tensors_travel_as_arrays_and_come_back_the_same():
    batch = batch_like_asrflow()
    packed = pickle.loads(pickle.dumps(packed_convert(batch)))
    assert isinstance(packed["speech"], torch.Tensor)  # over the limit: shared memory
    assert batch["speech"].numel() * 4 > SMALL_TENSOR_BYTES
    for key in ("speech_lengths", "text", "text_lengths", "mask", "strided"):
        assert isinstance(packed[key], Packed), key
    assert isinstance(packed["bf16"], torch.Tensor)  # bfloat16 has no NumPy twin
    assert isinstance(packed["pair"][1][0], Packed)
    # default_convert (batch_size=None's collation, also without workers) makes tuples lists
    assert_same(unpack(packed), default_convert(batch))


def test_a_loader_with_workers_gives_the_batches_of_one_without():
    alone = [b for b in worker_loader(Batches(), 0)]
    with_workers = [b for b in worker_loader(Batches(), 2, worker_nice=5)]
    assert len(alone) == len(with_workers) == 3
    for a, w in zip(alone, with_workers, strict=True):
        assert_same(w, a)


def test_workers_run_at_the_lower_priority_and_still_run_the_loaders_own_init():
    here = os.nice(0)
    loader = worker_loader(NiceProbe(), 2, worker_nice=7, worker_init_fn=mark_init)
    items = list(loader)
    assert sorted(int(b["i"]) for b in items) == [0, 1, 2, 3]
    assert {int(b["nice"]) for b in items} == {min(here + 7, 19)}
    assert {int(b["init_ran"]) for b in items} == {1}  # e.g. Lightning's worker seeding
    # the loader's own attribute is left as it was: Lightning adds its seeding only where a
    # loader has no worker_init_fn, so the priority must not look like one
    assert loader.worker_init_fn is mark_init
    bare = worker_loader(NiceProbe(), 1, worker_nice=7)
    assert {int(b["nice"]) for b in bare} == {min(here + 7, 19)}
    assert bare.worker_init_fn is None
    assert os.nice(0) == here  # the trainer keeps its priority


def test_at_the_trainers_priority_workers_keep_it():
    here = os.nice(0)
    assert {int(b["nice"]) for b in worker_loader(NiceProbe(), 1, worker_nice=0)} == {here}


@pytest.mark.parametrize("nice", [-1, 20, 2.5, True])
def test_worker_start_refuses_what_nice_cannot_mean(nice):
    from asrflow.errors import AsrflowError

    with pytest.raises(AsrflowError, match="worker_nice"):
        WorkerStart(nice)


def draws_between_epochs(loader, epochs: int = 3) -> list[float]:
    """What a model would draw from torch's global generator (dropout) after each epoch of
    ``loader``, started from one seed: it moves with every draw the loader makes."""
    torch.manual_seed(123)
    drawn = []
    for _ in range(epochs):
        for _batch in loader:
            pass
        drawn.append(torch.rand(()).item())
    return drawn


def test_the_global_generator_moves_alike_with_any_number_of_workers():
    from torch.utils.data import DataLoader

    from asrflow.train.batches.loader import batch_loader

    persistent = draws_between_epochs(batch_loader(Batches(), range(3), 1))
    assert draws_between_epochs(batch_loader(Batches(), range(3), 0)) == persistent
    restarting = worker_loader(Batches(), 1, sampler=range(3))  # the sharded loader's kind
    assert draws_between_epochs(restarting) == persistent
    # PyTorch's own in-process loader draws at every epoch: what the test guards against
    plain = DataLoader(Batches(), batch_size=None, sampler=range(3))
    assert draws_between_epochs(plain)[1:] != persistent[1:]


def test_a_run_trains_the_same_weights_with_and_without_a_loader_worker(tmp_path):
    """``batching.num_workers`` is an operational key: with dropout, validation and a second
    epoch in the run, 0 workers and 1 give the same weights."""
    from asrflow.checkpoints import read_training_checkpoint
    from asrflow.train.run.runner import train_run
    from tests.train.tiny_run import make_tiny_run

    weights = {}
    for workers in (0, 1):
        overrides = {
            "encoder_conf": {"dropout_rate": 0.3, "attention_dropout_rate": 0.3},
            "trainer": {"max_steps": 10},  # over an epoch of the 12 train cuts
            "batching": {"num_workers": workers},
        }
        root = tmp_path / f"w{workers}"
        spec = make_tiny_run(root / "data", overrides=overrides)
        summary = train_run(spec, root / "work", root / "out", root / "summary.json")
        assert summary["status"] == "completed" and summary["steps"] == 10
        ckpt = read_training_checkpoint(root / "out" / "checkpoints" / "last.ckpt")
        assert ckpt["epoch"] >= 1  # a second epoch started: a second train iterator
        weights[workers] = ckpt["state_dict"]
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
