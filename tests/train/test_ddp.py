"""DDP on two CPU processes (gloo), started the way ``srun`` starts them (simulated SLURM).

One job: two ranks train a tiny run, stop at a planted failure after the step-2 checkpoint,
resume from it in the same processes and finish at step 8. Checked: each rank trains on its own
shard and every train utterance is seen exactly once per epoch across the ranks (also across the
resume); the loss each rank back-propagates is divided by the *global* token count; checkpoints,
metrics and transcripts are written once, by rank 0; the validation metrics of the sharded dev set
equal a single-process validation of the same checkpoint.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from tests.train.tiny_run import (
    TINY_RECIPE,
    make_tiny_run,
    spec_to_json,
    with_overrides,
)

# slow: two fresh Python processes: ~40 s of the ~65 s are imports
pytestmark = pytest.mark.slow

WORLD = 2
ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = {
    "trainer": {"max_steps": 8, "val_check_interval": 2, "devices": WORLD},
    # <= 2 s per batch: at least 3 batches per rank and epoch, so step 2 is mid-epoch
    "batching": {"max_duration": 2.0},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def srun_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    """The environment ``srun --ntasks-per-node=<world>`` gives task ``rank`` on one node."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_"))}
    env.update(
        SLURM_JOB_ID="4242",
        SLURM_JOB_NAME="asrflow-test",
        SLURM_NTASKS=str(world),
        SLURM_NTASKS_PER_NODE=str(world),
        SLURM_NNODES="1",
        SLURM_NODEID="0",
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(rank),
        SLURM_NODELIST="127.0.0.1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        **extra,
    )
    return env


def launch(job: dict, root: Path, world: int = WORLD) -> list[subprocess.Popen]:
    """Start ``world`` rank workers on ``job`` (logs in ``root/rank<R>.log``)."""
    root.mkdir(parents=True, exist_ok=True)
    job_path = root / "job.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    port = free_port()
    procs = []
    for rank in range(world):
        log = open(root / f"rank{rank}.log", "w", encoding="utf-8")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.train.rank_worker", str(job_path)],
                cwd=ROOT,
                env=srun_env(rank, world, port),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()
    return procs


def wait_all(procs: list[subprocess.Popen], root: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise
    for rank, p in enumerate(procs):
        log = (root / f"rank{rank}.log").read_text(encoding="utf-8")
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{log[-4000:]}"


def records(root: Path, rank: int) -> list[dict]:
    path = root / f"batches.rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_each_utterance_once_per_epoch(per_rank: list[list[dict]], train_ids: list[str]) -> None:
    """Across the ranks' batch records: no utterance twice in an epoch, every utterance in each
    finished epoch, and at every step the ranks trained on different batches."""
    by_epoch: dict[int, list[str]] = defaultdict(list)
    for rank_records in per_rank:
        for r in rank_records:
            if not r["filler"]:  # a filler trains with weight zero on a batch seen already
                by_epoch[r["epoch"]].extend(r["ids"])
    last_epoch = max(by_epoch)
    assert last_epoch >= 1, "not one whole epoch trained"
    for epoch, ids in by_epoch.items():
        assert len(ids) == len(set(ids)), f"epoch {epoch}: an utterance seen twice"
        if epoch < last_epoch:
            assert sorted(ids) == sorted(train_ids), f"epoch {epoch} is incomplete"
    for a, b in zip(*per_rank, strict=True):
        assert a["step"] == b["step"] and not set(a["ids"]) & set(b["ids"])


def assert_loss_per_global_token(per_rank: list[list[dict]]) -> int:
    """Each rank's loss is its summed loss divided by the tokens of *all* ranks' batches (times
    the world size: DDP averages the gradients); returns the number of steps checked."""
    steps: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for rank_records in per_rank:
        for r in rank_records:
            steps[(r["run"], r["step"])].append(r)
    world = len(per_rank)
    for key, group in steps.items():
        assert len(group) == world, key
        global_tokens = sum(r["tokens"] for r in group if not r["filler"])
        for r in group:
            want = 0.0 if r["filler"] else r["loss_sum"] * world / global_tokens
            assert r["loss"] == pytest.approx(want, rel=1e-5, abs=1e-12)
    return len(steps)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    spec = make_tiny_run(data)
    root = tmp_path_factory.mktemp("ddp")
    job = {
        "spec": json.loads(spec_to_json(spec)),
        "root": str(root),
        "runs": [
            {"overrides": OVERRIDES, "fail_at_step": 2},  # dies after the step-2 checkpoint
            {"overrides": OVERRIDES, "fail_at_step": None},  # resumes from it
        ],
    }
    started = time.time()
    wait_all(launch(job, root), root)
    return spec, root, OVERRIDES, time.time() - started


def test_each_utterance_once_per_epoch_across_ranks_and_resume(ddp_run):
    spec, root, _, _ = ddp_run
    from asrflow.data.cuts import load_cuts

    train_ids = sorted(load_cuts(spec.train_cuts[0]).ids)
    per_rank = [records(root, r) for r in range(WORLD)]
    for rank_records in per_rank:
        assert [r["run"] for r in rank_records if r["step"] < 2] == [0, 0]
        assert [r["step"] for r in rank_records if r["run"] == 1] == list(range(2, 8))
    assert_each_utterance_once_per_epoch(per_rank, train_ids)
    rank0_log = (root / "rank0.log").read_text(encoding="utf-8")
    assert "resume: skipped 2 batch(es)" in rank0_log
    assert "slurm launch, rank 0 of 2" in rank0_log


def test_loss_is_divided_by_the_global_token_count(ddp_run):
    _, root, _, _ = ddp_run
    assert assert_loss_per_global_token([records(root, r) for r in range(WORLD)]) == 8


def test_checkpoints_metrics_and_transcripts_are_written_once(ddp_run):
    _, root, _, _ = ddp_run
    summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed" and summary["steps"] == 8
    assert summary["world_size"] == WORLD and summary["devices"] == WORLD
    assert summary["cluster"]["environment"] == "slurm"
    assert summary["cluster"]["world_size"] == WORLD and summary["cluster"]["job_id"] == "4242"
    assert summary["resumed_from"] == str(root / "work/checkpoints/last.ckpt")
    checkpoints = sorted(p.name for p in (root / "out/checkpoints").iterdir())
    assert len(checkpoints) == 2 and "last.ckpt" in checkpoints, checkpoints
    assert checkpoints[1].startswith("valid.loss.step")
    transcripts = sorted(p.name for p in (root / "out/diagnostics/transcripts").iterdir())
    assert transcripts == [f"step{s:07d}.txt" for s in (2, 4, 6, 8)]
    final = (root / "out/diagnostics/transcripts/step0000008.txt").read_text(encoding="utf-8")
    assert final.count("REF:") == TINY_RECIPE["diagnostics"]["num_decode_utterances"]
    with open(root / "out/csv/metrics.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    # one row per step and validation, not one per rank; the rows of the interrupted run are
    # kept (Lightning logs the batch that makes step k + 1, and the validation after it, at k)
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(8))
    assert [int(r["step"]) for r in rows if r["valid/loss"]] == [1, 3, 5, 7]


def test_sharded_validation_equals_single_process_validation(ddp_run, tmp_path):
    import lightning as L

    from asrflow.train.loop.parts import build_trainer_parts

    spec, root, overrides, _ = ddp_run
    summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
    parts = build_trainer_parts(with_overrides(spec, overrides), tmp_path)
    checkpoint = torch.load(root / "out/checkpoints/last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 8
    parts["module"].load_state_dict(checkpoint["state_dict"])
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (single,) = trainer.validate(parts["module"], parts["dev_loader"], verbose=False)
    for key in ("valid/loss", "valid/wer", "valid/cer"):
        assert summary["final_metrics"][key] == pytest.approx(single[key], rel=1e-5), key


@pytest.fixture(scope="module")
def ddp_shards_run(tmp_path_factory):
    """The same two ranks on a sharded corpus (issue 16): 6 shards of 2 cuts, 2 loader workers
    per rank; stopped mid-epoch after step 2 and resumed."""
    import dataclasses

    from asrflow.data.shards import ShardSettings, write_shards

    data = tmp_path_factory.mktemp("shard-data")
    spec = make_tiny_run(data)
    write_shards(spec.train_cuts[0], data / "shards", ShardSettings(shard_size=2))
    spec = dataclasses.replace(spec, train_shards=[str(data / "shards")])
    overrides = {**OVERRIDES, "batching": {"max_duration": 2.0, "num_workers": 2}}
    root = tmp_path_factory.mktemp("ddp-shards")
    job = {
        "spec": json.loads(spec_to_json(spec)),
        "root": str(root),
        "runs": [
            {"overrides": overrides, "fail_at_step": 2},  # after the step-2 checkpoint
            {"overrides": overrides, "fail_at_step": None},
        ],
    }
    wait_all(launch(job, root), root)
    return spec, root


def test_shards_each_cut_once_per_epoch_across_ranks_and_workers_and_resume(ddp_shards_run):
    spec, root = ddp_shards_run
    from asrflow.data.cuts import load_cuts

    per_rank = [records(root, r) for r in range(WORLD)]
    for rank_records in per_rank:  # both ranks take every step, fillers included
        assert [r["step"] for r in rank_records if r["run"] == 1] == list(range(2, 8))
    assert_each_utterance_once_per_epoch(per_rank, sorted(load_cuts(spec.train_cuts[0]).ids))
    assert assert_loss_per_global_token(per_rank) == 8
    # with these seeds rank 0 runs out of shards one step before rank 1 in the first epoch
    fillers = [(r["rank"], r["epoch"], r["step"]) for r in _with_rank(per_rank) if r["filler"]]
    assert fillers == [(0, 0, 5)], fillers
    rank0_log = (root / "rank0.log").read_text(encoding="utf-8")
    assert "resume: skipped" in rank0_log
    summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed" and summary["steps"] == 8, summary
    assert list(summary["hashes"]["train_shards"]) == spec.train_shards


def _with_rank(per_rank: list[list[dict]]) -> list[dict]:
    return [{**r, "rank": rank} for rank, records in enumerate(per_rank) for r in records]


def test_out_of_memory_on_one_rank_ends_every_rank_with_that_failure(tmp_path):
    """Rank 1 alone runs out of memory mid-run: rank 0 does not wait for the process group's
    timeout nor fail with a broken connection; both processes end at once, the job succeeds, and
    rank 0 records rank 1's failure as the run's result."""
    spec = make_tiny_run(tmp_path / "data")
    root = tmp_path / "oom"
    job = {
        "spec": json.loads(spec_to_json(spec)),
        "root": str(root),
        "runs": [{"overrides": OVERRIDES, "fail_at_step": 3, "fail_rank": 1, "fail_with": "oom"}],
    }
    wait_all(launch(job, root), root, timeout=180)  # both ranks exit 0
    summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "failed"
    assert summary["failure"] == "out_of_memory"
    assert summary["failed_rank"] == 1
    assert summary["error"].startswith("rank 1: OutOfMemoryError: CUDA out of memory")
    assert summary["cluster"]["global_rank"] == 0  # recorded by rank 0
    assert summary["steps"] == 3
    assert "rank 1 failed (out_of_memory)" in (root / "rank0.log").read_text(encoding="utf-8")
