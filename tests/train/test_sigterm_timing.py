"""A SIGTERM at any moment of training resumes to the same learning curve, every step and every
validation logged once.

The signal is sent to this process from inside the training loop at moments Lightning treats
differently: during a training batch just before a validation is due, at the end of a
validation, at the end of an epoch. Measured before the fix (lightning 2.6, a scancel'd job in
the SLURM test): a checkpoint saved where Lightning itself raised its ``SIGTERMException`` resumed
one logging step off, and one saved at a validation step skipped that validation. A finished run
continued with more steps is a resume too.
"""

from __future__ import annotations

import csv
import os
import signal

import pytest
import torch

from asrflow.train.loop.failures import TrainingPreempted
from asrflow.train.loop.module import AsrModule
from asrflow.train.run.runner import train_run
from tests.train.tiny_run import make_tiny_run, with_overrides

STEPS, EVERY = 14, 4
OVERRIDES = {
    "trainer": {"max_steps": STEPS, "val_check_interval": EVERY},
    "batching": {"max_duration": 1.5},  # one cut per batch: 12 batches per epoch
}


def _sigterm_at(monkeypatch, hook: str, step: int) -> None:
    """Send SIGTERM to this process once, after the module's ``hook`` ran at ``step``."""
    original = getattr(AsrModule, hook, None)
    sent = []

    def hooked(self, *args, **kwargs):
        out = original(self, *args, **kwargs) if original is not None else None
        if self.global_step == step and not sent:
            sent.append(step)
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(AsrModule, hook, hooked, raising=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize(
    ("hook", "step"),
    [
        ("training_step", EVERY - 1),  # in the batch that makes step 4, validated after it
        ("on_validation_end", EVERY),  # the validation ended, the next batch not started
        ("on_train_epoch_end", 12),  # Lightning checks its own SIGTERM flag at epoch ends
    ],
)
def test_sigterm_resumes_without_losing_or_repeating_a_step(
    data, tmp_path, monkeypatch, hook, step
):
    spec = with_overrides(data, OVERRIDES)
    work, out, summary = tmp_path / "work", tmp_path / "out", tmp_path / "summary.json"
    _sigterm_at(monkeypatch, hook, step)
    with pytest.raises(TrainingPreempted):
        train_run(spec, work, out, summary)
    saved = torch.load(work / "checkpoints/last.ckpt", weights_only=True)["global_step"]
    assert step <= saved <= step + 1  # at most one batch after the signal
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    monkeypatch.undo()

    result = train_run(spec, work, out, summary)
    assert result["status"] == "completed" and result["steps"] == STEPS
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # a finished run's too
    with open(work / "csv/metrics.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(STEPS))
    # Lightning logs the validation after optimizer step k at step k - 1
    validated = [int(r["step"]) + 1 for r in rows if r["valid/loss"]]
    assert validated == list(range(EVERY, STEPS + 1, EVERY)), validated


def test_a_run_resumed_in_its_second_epoch_logs_each_step_once(data, tmp_path):
    """A run stopped at step 14 (the Trainer's own max_steps, under the recipe's 20) resumes from
    its final checkpoint; taken in the second epoch (12 batches per epoch), lightning 2.6
    restored its logging step one behind."""
    work, out, summary = tmp_path / "work", tmp_path / "out", tmp_path / "summary.json"
    spec = with_overrides(data, OVERRIDES | {"trainer": {"max_steps": 20, "val_check_interval": 4}})
    stopped = train_run(spec, work, out, summary, max_steps=14)
    assert stopped["steps"] == 14
    result = train_run(spec, work, out, summary)
    assert result["steps"] == 20 and result["resumed_from"] is not None
    with open(work / "csv/metrics.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(20))
    validated = [int(r["step"]) + 1 for r in rows if r["valid/loss"]]
    assert validated == [4, 8, 12, 16, 20], validated
