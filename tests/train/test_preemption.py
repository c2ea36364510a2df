"""A training job that gets SIGTERM saves last.ckpt, fails, and its rerun resumes from it.

The job runs in a subprocess (as under SLURM, which sends SIGTERM at the time limit, on
``scancel`` and on preemption); the rerun runs in this process and must continue the same
epoch's batch order from the saved step.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asrflow.train.batches.loader import make_sampler
from asrflow.train.loop.module import AsrModule
from asrflow.train.run.runner import train_run
from tests.train.test_ddp import ROOT, srun_env
from tests.train.tiny_run import make_tiny_run, recipe_with_overrides, spec_to_json, with_overrides

# slow: a fresh Python process: ~25 s of imports
pytestmark = pytest.mark.slow

LONG = {
    "trainer": {"max_steps": 400, "val_check_interval": 400},
    "batching": {"max_duration": 1.5},
}
"""Far more steps than the test waits for, no validation (and its checkpoint) before SIGTERM,
one cut per batch (12 batches per epoch)."""


def wait_for_step(marker: Path, step: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the training job ended before it got SIGTERM"
        if marker.is_file() and int(marker.read_text() or 0) >= step:
            return
        time.sleep(0.05)
    raise TimeoutError(f"step {step} not reached in {timeout} s")


@pytest.fixture(scope="module")
def preempted(tmp_path_factory):
    spec = make_tiny_run(tmp_path_factory.mktemp("data"))
    root = tmp_path_factory.mktemp("job")
    job = {
        "spec": json.loads(spec_to_json(spec)),
        "root": str(root),
        "runs": [{"overrides": LONG, "fail_at_step": None}],
        "sleep_per_step": 0.2,  # SIGTERM lands within the first epoch
    }
    (root / "job.json").write_text(json.dumps(job), encoding="utf-8")
    env = {k: v for k, v in srun_env(0, 1, 0).items() if not k.startswith("SLURM_")}
    with open(root / "job.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.train.rank_worker", str(root / "job.json")],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    started = time.time()
    try:
        wait_for_step(root / "step.rank0", 3, proc, timeout=240)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return spec, root, proc.returncode, time.time() - started


def test_sigterm_saves_last_checkpoint_and_fails_the_job(preempted):
    _, root, returncode, seconds = preempted
    log = (root / "job.log").read_text(encoding="utf-8")
    assert returncode != 0, log[-3000:]
    assert "TrainingPreempted" in log and "SIGTERM: saved" in log
    last = root / "work/checkpoints/last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    trained = [json.loads(line) for line in (root / "batches.rank0.jsonl").read_text().splitlines()]
    assert checkpoint["global_step"] >= 3
    assert checkpoint["global_step"] == len(trained)  # saved at the step boundary
    assert checkpoint["asrflow_data"]["batches_in_epoch"] == len(trained)  # epoch 0 (12 batches)
    summary = json.loads((root / "work/summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "preempted"
    assert summary["saved_checkpoint"] == str(last)
    assert summary["steps"] == checkpoint["global_step"]
    assert "rerun the job to resume" in summary["error"]
    assert not (root / "summary.json").exists() and not (root / "out").exists()
    print(f"start to SIGTERM exit: {seconds:.1f} s")


def test_rerun_resumes_from_the_saved_step_and_batch(preempted, monkeypatch):
    spec, root, _, _ = preempted
    trained = [json.loads(line) for line in (root / "batches.rank0.jsonl").read_text().splitlines()]
    saved = len(trained)
    resumed: list[tuple[int, list[str]]] = []
    step_fn = AsrModule.training_step

    def recording_step(self, batch, batch_idx):
        resumed.append((self.global_step, list(batch["ids"])))
        return step_fn(self, batch, batch_idx)

    monkeypatch.setattr(AsrModule, "training_step", recording_step)
    # the same recipe (a changed one would start afresh), stopped 3 steps on by the Trainer
    summary = train_run(
        with_overrides(spec, LONG),
        root / "work",
        root / "out",
        root / "summary.json",
        max_steps=saved + 3,
    )
    assert summary["status"] == "completed" and summary["steps"] == saved + 3
    assert summary["resumed_from"] == str(root / "work/checkpoints/last.ckpt")
    assert [s for s, _ in resumed] == [saved, saved + 1, saved + 2]
    # the epoch's batch order continues exactly where the killed job stopped
    from asrflow.data.cuts import load_cuts

    recipe = recipe_with_overrides(spec.recipe, LONG)
    sampler = make_sampler(load_cuts(spec.train_cuts[0]), recipe.batching)
    reference = [[c.id for c in batch] for batch in sampler]
    sampler.set_epoch(1)
    reference += [[c.id for c in batch] for batch in sampler]
    order = [r["ids"] for r in trained] + [ids for _, ids in resumed]
    assert order == reference[: len(order)]
    # the metrics of the steps before SIGTERM are kept beside the resumed ones
    with open(root / "work/csv/metrics.csv", newline="", encoding="utf-8") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f) if r["train/loss"]]
    assert steps == list(range(saved + 3))
