import torch

from asrflow.tokens import greedy_ctc
from asrflow.train.resume import SkippingSampler


def test_greedy_ctc_collapses_repeats_drops_blanks_and_respects_lengths():
    best = torch.tensor([[0, 3, 3, 0, 3, 4, 4, 0], [5, 5, 0, 0, 6, 6, 6, 6]])
    assert greedy_ctc(best, torch.tensor([8, 3]), blank=0) == [[3, 3, 4], [5]]
    assert greedy_ctc(torch.zeros(1, 4, dtype=torch.long), torch.tensor([4]), 0) == [[]]


class Epochs:
    """A stand-in sampler: batch order depends on the epoch only."""

    def __init__(self):
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter([f"e{self.epoch}b{i}" for i in range(5)])


def test_skipping_sampler_resumes_the_epoch_where_training_stopped():
    sampler = SkippingSampler(Epochs())
    sampler.set_epoch(2)
    assert list(sampler) == ["e2b0", "e2b1", "e2b2", "e2b3", "e2b4"]
    sampler.skip = 3
    assert list(sampler) == ["e2b3", "e2b4"]
    assert list(sampler) == ["e2b0", "e2b1", "e2b2", "e2b3", "e2b4"]  # skip applies once
    sampler.skip = 9
    assert list(sampler) == []
