"""asrflow.train.run.launch without SLURM: what the train job asks for, the srun line, the
job file."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from asrflow.errors import AsrflowError
from asrflow.recipe.load import load_recipe
from asrflow.train.run.launch import (
    SrunLaunch,
    job_file,
    launcher,
    read_job,
    srun_train,
    train_resources,
    worker,
    write_job,
)
from asrflow.train.spec import RunSpec, spec_from_json, spec_to_json
from tests.configs import run_settings
from tests.train.tiny_espnet import TINY_CTC_MODEL

PROFILE_TRAIN = {"slurm_partition": "gpu", "gpu_model": "a100"}
"""profiles/slurm's set-resources of train."""

SPEC = RunSpec(
    name="big",
    recipe=load_recipe({**TINY_CTC_MODEL, "trainer": {"devices": 4, "num_nodes": 2}}),
    recipe_name="r",
    train_cuts=["a.jsonl.gz", "b.jsonl.gz"],
    dev_cuts="dev.jsonl.gz",
    bpe_model="bpe.model",
    tokens="tokens.txt",
    normalization={"lowercase": True},
    train_weights=[1.0, 0.5],
    init={"model": "w.pt"},
)


class _Resources(dict):
    """A job's resources as the SLURM executor plugin reads them (``.get`` and attributes)."""

    def __getattr__(self, name):
        return self[name]


def sbatch_line(resources: dict, threads: int) -> str:
    """The sbatch call snakemake-executor-plugin-slurm makes for a train job with these rule
    resources (None = unset, as Snakemake drops them) and the profile's set-resources."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    res = {k: v for k, v in resources.items() if v is not None}
    res.update(PROFILE_TRAIN, mem_mb=8000, runtime=60)
    job = SimpleNamespace(resources=_Resources(res), threads=threads)
    params = {
        "run_uuid": "u",
        "slurm_logfile": "log/%j.log",
        "comment_str": "rule_train",
        "account": "",
        "partition": "-p gpu",
        "workdir": None,
    }
    return get_submit_command(job, params) + set_gres_string(job)


def res(devices: int, nodes: int = 1, cpus: int = 8, **extra) -> dict:
    """``runs.<run>.resources`` as the schema check leaves it (launcher auto unless given)."""
    given = {"devices": devices, "nodes": nodes, "cpus_per_device": cpus, **extra}
    return run_settings(resources=given)["resources"]


@pytest.mark.parametrize("devices", [1, 4])
def test_one_node_keeps_the_one_task_job(devices):
    asked = train_resources(res(devices))
    assert asked == {
        "gpu": devices,
        "cpus_per_gpu": 8,
        "nodes": 1,
        "mpi": None,
        "tasks_per_node": None,
        "tasks": None,
        "tasks_per_gpu": None,
        "cpus_per_task": None,
    }
    line = sbatch_line(asked, threads=8 * devices)
    assert f"--gpus=a100:{devices}" in line and "--cpus-per-gpu=8" in line, line
    assert "--nodes=1" in line and "--ntasks" not in line, line
    assert launcher(res(devices)) == "lightning"
    assert SrunLaunch.from_job({k: v for k, v in asked.items() if v is not None}) is None


def test_two_nodes_of_four_gpus_get_one_task_per_gpu():
    asked = train_resources(res(4, nodes=2))
    assert asked["mpi"] == "srun" and asked["nodes"] == 2 and asked["tasks_per_node"] == 4
    assert asked["gpu"] == 8 and asked["cpus_per_task"] == 8 and asked["cpus_per_gpu"] is None
    line = sbatch_line(asked, threads=32)
    for flag in ("--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=8", "--gpus=a100:8"):
        assert flag in line, (flag, line)
    assert "--ntasks-per-gpu" not in line and "--cpus-per-gpu" not in line, line
    assert SrunLaunch.from_job(asked) == SrunLaunch(2, 4, 8)


def test_two_nodes_of_one_gpu_get_one_task_per_node():
    asked = train_resources(res(1, nodes=2, cpus=4))
    assert (asked["tasks"], asked["tasks_per_node"], asked["tasks_per_gpu"]) == (2, None, 0)
    line = sbatch_line(asked, threads=4)
    for flag in ("--nodes=2", "--ntasks=2", "--cpus-per-task=4", "--gpus=a100:2"):
        assert flag in line, (flag, line)
    assert "--ntasks-per-gpu" not in line and "--ntasks-per-node" not in line, line
    assert SrunLaunch.from_job(asked) == SrunLaunch(2, 1, 4)


def test_srun_on_one_node_on_request():
    asked = train_resources(res(2, launcher="srun", cpus=1))
    assert asked["mpi"] == "srun" and asked["tasks_per_node"] == 2 and asked["gpu"] == 2
    assert "--ntasks-per-node=2" in sbatch_line(asked, threads=2)
    assert SrunLaunch.from_job(asked) == SrunLaunch(1, 2, 1)


def test_cpu_run_over_two_nodes():
    asked = train_resources(res(0, nodes=2, cpus=4))
    assert (asked["gpu"], asked["tasks"], asked["tasks_per_gpu"]) == (0, 2, None)
    assert SrunLaunch.from_job(asked) == SrunLaunch(2, 1, 4)


def test_launches_that_cannot_work_are_refused():
    with pytest.raises(AsrflowError, match="lightning cannot span 2 nodes"):
        train_resources(res(4, nodes=2, launcher="lightning"))
    with pytest.raises(AsrflowError, match="run of one process"):
        train_resources(res(1, launcher="srun"))
    with pytest.raises(AsrflowError, match="not one of"):
        launcher({**res(1), "launcher": "mpirun"})
    with pytest.raises(AsrflowError, match=r"runs\.r\.resources\.launcher: 'mpirun'"):
        res(1, launcher="mpirun")  # the schema check stops it first


def test_srun_command_line():
    assert SrunLaunch(2, 4, 8).command("/w/big.srun.json", python="/venv/bin/python") == [
        "srun",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "4",
        "--kill-on-bad-exit=1",
        "--cpus-per-task",
        "8",
        "/venv/bin/python",
        "-m",
        "asrflow.train.run.launch",
        "/w/big.srun.json",
    ]
    assert "--cpus-per-task" not in SrunLaunch(1, 2).command("j.json")


def test_run_spec_and_job_round_trip(tmp_path):
    assert spec_from_json(spec_to_json(SPEC)) == SPEC
    work = tmp_path / "results/work/big"
    path = write_job(
        job_file(work), SPEC, work, "out", "summary.json", threads=16, log_path="logs/big.log"
    )
    assert path == tmp_path / "results/work/big.srun.json"  # beside the work dir, not in it
    job = read_job(path)
    assert job["spec"] == SPEC and job["threads"] == 16
    assert job["work_dir"] == str(work) and job["log"].endswith("logs/big.log")
    assert all(json.loads(path.read_text())[k].startswith("/") for k in ("out_dir", "log"))


def test_srun_train_runs_srun_and_reports_a_failure(tmp_path):
    calls = []

    def fake_run(command, check):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0 if len(calls) == 1 else 137)

    work = tmp_path / "work/big"
    args = (SrunLaunch(2, 4, 8), SPEC, work, tmp_path / "out", tmp_path / "s.json")
    srun_train(*args, threads=32, log_path="logs/train/big.log", python="py", run=fake_run)
    assert calls[0][:4] == ["srun", "--nodes", "2", "--ntasks-per-node"]
    assert calls[0][-2:] == ["asrflow.train.run.launch", str(job_file(work))]
    assert read_job(job_file(work))["spec"] == SPEC
    with pytest.raises(AsrflowError) as failed:
        srun_train(*args, threads=32, log_path="logs/train/big.log", python="py", run=fake_run)
    message = str(failed.value)
    assert "srun of 8 rank(s) failed with exit code 137" in message
    assert "logs/train/big.rank<R>.log" in message and str(work / "summary.json") in message


def test_srun_train_outlives_a_sigterm_until_the_ranks_stop(tmp_path):
    """SLURM signals the batch step too: it must wait for srun (whose ranks save last.ckpt)
    instead of dying at once, then fail the job so that the retry resumes."""
    import os
    import signal

    events = []

    def fake_run(command, check):
        os.kill(os.getpid(), signal.SIGTERM)  # the job is cancelled while srun runs
        events.append("srun returned")  # still alive: the ranks had time to save
        return subprocess.CompletedProcess(command, 143)

    work = tmp_path / "work/big"
    args = (SrunLaunch(1, 2), SPEC, work, tmp_path / "out", tmp_path / "s.json")
    with pytest.raises(AsrflowError, match=r"got SIGTERM .* rerun the job to resume") as stopped:
        srun_train(*args, python="py", run=fake_run)
    assert events == ["srun returned"]
    assert str(work / "checkpoints") in str(stopped.value)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_srun_train_without_srun_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AsrflowError, match="there is no srun here"):
        srun_train(SrunLaunch(1, 2), SPEC, tmp_path / "w", tmp_path / "o", tmp_path / "s.json")


def test_worker_logs_to_its_rank_file_and_trains(tmp_path, monkeypatch):
    import asrflow.train.run.runner as runner

    trained = []
    monkeypatch.setattr(
        runner, "train_run", lambda *a, **k: trained.append((a, k)) or {"status": "completed"}
    )
    path = write_job(
        tmp_path / "j.json", SPEC, "w", "o", "s.json", threads=4, log_path=tmp_path / "big.log"
    )
    assert worker(path, env={"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}) == {"status": "completed"}
    ((args, kwargs),) = trained
    assert args[0] == SPEC and kwargs == {"threads": 4}
    assert "rank 1 of an srun launch" in (tmp_path / "big.rank1.log").read_text()
    assert not (tmp_path / "big.log").exists()
