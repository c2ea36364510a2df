import pytest
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


def test_logged_grad_norm_is_the_total_norm_of_all_gradients(tmp_path):
    """train/grad_norm is the 2-norm of every gradient as one vector, as Lightning's grad_norm
    computed it (its "grad_2.0_norm_total") and as gradient clipping sees it."""
    from lightning.pytorch.utilities import grad_norm

    from asrflow.train.parts import build_trainer_parts
    from asrflow.train.spec import spec_recipe
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    parts = build_trainer_parts(spec, spec_recipe(spec), tmp_path / "work")
    module = parts["module"]
    logged = {}
    module.log = lambda name, value, **kwargs: logged.update({name: value})
    module.on_before_optimizer_step(None)
    assert logged == {}  # no gradients yet: nothing to log
    loss, _, _ = module(next(iter(parts["train_loader"])))
    loss.backward()
    module.on_before_optimizer_step(None)
    every = torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])
    assert float(logged["train/grad_norm"]) == pytest.approx(float(every.norm()), rel=1e-5)
    total = grad_norm(module, norm_type=2)["grad_2.0_norm_total"]
    assert float(logged["train/grad_norm"]) == pytest.approx(float(total), rel=1e-5)
