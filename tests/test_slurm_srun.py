"""A train job whose ranks srun starts (launcher srun), through a real SLURM and profiles/slurm.

The run asks for 2 devices on 1 node with ``launcher: srun``: the profile submits it as one SLURM
job with two tasks (``sbatch --nodes=1 --ntasks-per-node=2``), the plugin runs the job's script
once in the batch step, and the script starts the two ranks with ``srun``
(:mod:`asrflow.train.run.launch`). Several nodes take the same path with ``--nodes N``, but CI has
one node, so that is not tested here.

Only the train job goes to SLURM: the steps before it (data, tokenizer, audit, smoke run) run
locally first. Test-only: the CI node has one fake GPU, so the job asks for one
(``--set-resources train:gpu=1``, with the profile's partition and GPU type repeated, since the
command line replaces the profile's set-resources) and both ranks fall back to the CPU (gloo).
Skips without SLURM, like tests/test_slurm_e2e.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid

import pytest
import yaml

from tests.e2e import environment, snakemake, write_config
from tests.test_slurm_e2e import (
    RUN,
    TIMEOUT_S,
    cancel_leftovers,
    cancel_mid_run,
    slurm_command,
    slurm_unavailable,
    submitted_jobs,
    tiny_config,
    tiny_recipe,
    trained_steps,
)
from tests.tiny_dag import prepared_tiny

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("the_slurm_cluster_alone")]

TRAIN = f"results/runs/{RUN}/train/summary.json"
RESOURCES = {
    "devices": 2,
    "cpus_per_device": 1,
    "mem_mb": 3000,
    "runtime": 15,
    "launcher": "srun",
}
SET_RESOURCES = ["train:slurm_partition='gpu'", "train:gpu_model='a100'", "train:gpu=1"]


@pytest.fixture(scope="module")
def srun_job(tmp_path_factory):
    if reason := slurm_unavailable():
        pytest.skip(reason)
    started = time.time()
    workdir = prepared_tiny(tmp_path_factory)
    config = tiny_config()
    config["runs"][RUN]["resources"] = dict(RESOURCES)
    write_config(workdir, config)
    (workdir / "config/recipes").mkdir(parents=True, exist_ok=True)
    recipe = tiny_recipe()
    recipe["trainer"].update(max_steps=4, val_check_interval=2)
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))
    smoke, audit = (f"results/runs/{RUN}/{s}" for s in ("smoke/summary.json", "audit/batches.json"))
    snakemake(workdir, smoke, audit)  # locally
    prefix = f"asrflowtest_{uuid.uuid4().hex[:8]}"
    command = slurm_command(prefix)
    command[-1] = TRAIN
    at = command.index("--verbose")
    command[at:at] = ["--set-resources", *SET_RESOURCES]
    try:
        proc = subprocess.run(
            command,
            cwd=workdir,
            capture_output=True,
            text=True,
            env=environment(),
            timeout=TIMEOUT_S + 120,
        )
    finally:
        cancel_leftovers(prefix)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        slurm_logs = sorted((workdir / ".snakemake/slurm_logs").rglob("*.log"))
        tails = "\n".join(f"== {p}\n{p.read_text()[-4000:]}" for p in slurm_logs[-2:])
        ranks = "\n".join(
            f"== {p}\n{p.read_text()[-3000:]}" for p in (workdir / "logs/train").glob("*.log")
        )
        pytest.fail(f"snakemake --profile profiles/slurm failed:\n{log[-6000:]}\n{tails}\n{ranks}")
    (job,) = [j for j in submitted_jobs(log).values() if j["rule"] == "train"]
    return workdir, job, time.time() - started


def test_one_slurm_job_with_two_tasks_trains_two_ranks(srun_job):
    workdir, job, seconds = srun_job
    sbatch = job["sbatch"]
    for flag in ("--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus=a100:1"):
        assert flag in sbatch, (flag, sbatch)
    assert " -p gpu " in sbatch and "--cpus-per-gpu" not in sbatch, sbatch
    summary = json.loads((workdir / TRAIN).read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4, summary
    assert summary["world_size"] == 2 and summary["accelerator"] == "cpu", summary
    cluster = summary["cluster"]
    assert (cluster["environment"], cluster["world_size"], cluster["devices"]) == ("slurm", 2, 2)
    assert cluster["job_id"] == job["slurm_id"], (cluster, job)
    record = json.loads((workdir / f"results/runs/{RUN}/train/summary.json.prov.json").read_text())
    assert record["host"]["slurm"]["job_id"] == job["slurm_id"], record["host"]
    print(f"srun launch of 2 ranks through profiles/slurm: {seconds:.0f} s in all")


def test_rank_0_alone_writes_the_outputs_and_each_rank_logs(srun_job):
    from asrflow.cli import main as asrflow_main

    workdir, _, _ = srun_job
    logs = workdir / "logs/train"
    job_log = (logs / f"{RUN}.log").read_text()
    assert "one srun task each: srun --nodes 1 --ntasks-per-node 2" in job_log, job_log
    assert "rule train: done" in job_log, job_log
    ranks = [(logs / f"{RUN}.rank{r}.log").read_text() for r in (0, 1)]
    for r, text in enumerate(ranks):
        assert f"rank {r} of an srun launch" in text and f"slurm launch, rank {r} of 2" in text
    assert ranks[0].count(f"run {RUN} completed: wrote") == 1, ranks[0]
    assert "completed: wrote" not in ranks[1], ranks[1]
    assert not list((workdir / "results/work").glob(f"{RUN}.stale-*"))
    assert asrflow_main(["verify", str(workdir / "results")]) == 0


def test_scancelled_srun_job_resumes_on_the_retry(srun_job):
    """issue 5 section 4 with srun-started ranks: SLURM signals the batch step and the ranks'
    step; the batch step waits while the ranks save last.ckpt, and the retry resumes there."""
    workdir, _, _ = srun_job
    recipe = tiny_recipe()
    recipe["trainer"].update(max_steps=64, val_check_interval=8)
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))
    prefix = f"asrflowtest_{uuid.uuid4().hex[:8]}"
    command = slurm_command(prefix)
    command[command.index("--retries") + 1] = "1"
    command[-1] = TRAIN
    at = command.index("--verbose")
    command[at:at] = ["--set-resources", *SET_RESOURCES]
    code, out, cancelled_at = cancel_mid_run(workdir, command, prefix, min_step=16)
    assert code == 0, out[-6000:]
    summary = json.loads((workdir / TRAIN).read_text())
    assert summary["status"] == "completed" and summary["steps"] == 64, summary
    assert summary["world_size"] == 2 and summary["resumed_from"], summary
    # the cancelled job's SLURM log: the batch step outlived the ranks, which saved
    cancelled = "\n".join(
        p.read_text() for p in (workdir / ".snakemake/slurm_logs/rule_train").rglob("*.log")
    )
    assert "got SIGTERM (a time limit, scancel or preemption)" in cancelled, cancelled[-4000:]
    # the retry (whose logs replaced the cancelled job's) resumed from the SIGTERM checkpoint
    rank0 = (workdir / f"logs/train/{RUN}.rank0.log").read_text()
    kept = [int(s) for s in re.findall(r"metrics row\(s\) of steps before (\d+)", rank0)]
    assert kept and kept[-1] >= cancelled_at, rank0[-3000:]
    assert trained_steps(workdir) == list(range(64))
