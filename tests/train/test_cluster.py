"""Launch detection under simulated SLURM/torchrun variables, and the CPU fallback."""

from __future__ import annotations

import dataclasses
import logging
import os

import pytest
import torch

from asrflow.errors import AsrflowError
from asrflow.ranks import launched_rank
from asrflow.train.cluster import (
    ClusterInfo,
    check_sampler_rank,
    cpu_fallback,
    detect_cluster,
    threads_per_rank,
)
from asrflow.train.run.runner import train_run
from tests.train.tiny_run import make_tiny_run, with_overrides


def slurm(ntasks: int, per_node: int | None, nnodes: int, procid: int, **extra: str) -> dict:
    """What ``srun`` sets for task ``procid`` (``per_node=None``: submitted with --ntasks)."""
    env = {
        "SLURM_JOB_ID": "777",
        "SLURM_JOB_NAME": "train",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NNODES": str(nnodes),
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid % (per_node or ntasks)),
        "SLURM_NODEID": str(procid // (per_node or ntasks)),
        "SLURM_NODELIST": "gpu[01-02]",
        **extra,
    }
    if per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(per_node)
    return env


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("SLURM_") or key in (
            "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
        ):  # fmt: skip
            monkeypatch.delenv(key)
    return monkeypatch


def test_two_nodes_of_four_gpus_agree_with_lightning(clean_env):
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    env = slurm(8, 4, 2, procid=5)
    for key, value in env.items():
        clean_env.setenv(key, value)
    info = detect_cluster(devices=4, num_nodes=2)
    assert info == ClusterInfo(
        environment="slurm",
        world_size=8,
        global_rank=5,
        local_rank=1,
        node_rank=1,
        num_nodes=2,
        devices=4,
        job_id="777",
    )
    assert SLURMEnvironment.detect()
    lightning = SLURMEnvironment(auto_requeue=False)
    lightning.validate_settings(num_devices=4, num_nodes=2)
    assert (
        lightning.world_size(),
        lightning.global_rank(),
        lightning.local_rank(),
        lightning.node_rank(),
        lightning.main_address,
    ) == (info.world_size, info.global_rank, info.local_rank, info.node_rank, "gpu01")


def test_trainer_takes_the_ranks_srun_gives(clean_env):
    import lightning as L
    from lightning.pytorch.plugins.environments import SLURMEnvironment
    from lightning_utilities.core.rank_zero import rank_zero_only

    # the Trainer sets Lightning's process-wide rank to 1 here: put it back afterwards, or every
    # later test's rank-zero-only logging (CSV metrics, checkpoints) silently does nothing
    clean_env.setattr(rank_zero_only, "rank", getattr(rank_zero_only, "rank", 0))

    for key, value in slurm(2, 2, 1, procid=1).items():
        clean_env.setenv(key, value)
    info = detect_cluster(devices=2)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        plugins=[SLURMEnvironment(auto_requeue=False)],
        logger=False,
        enable_checkpointing=False,
    )
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank) == (
        info.world_size,
        info.global_rank,
        info.local_rank,
        info.node_rank,
    )


def test_without_slurm_lightning_or_torchrun_start_the_processes():
    assert detect_cluster(2, 1, env={}) == ClusterInfo("lightning", 2, 0, 0, 0, 1, 2)
    child = detect_cluster(2, 2, env={"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4"})
    assert (child.world_size, child.global_rank, child.local_rank, child.node_rank) == (4, 3, 1, 1)
    torchrun = {"RANK": "2", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    info = detect_cluster(2, 2, env={**torchrun, "WORLD_SIZE": "4"})
    assert (info.environment, info.global_rank, info.node_rank) == ("torchelastic", 2, 1)
    with pytest.raises(AsrflowError, match="--nproc-per-node 2"):
        detect_cluster(2, 2, env={**torchrun, "WORLD_SIZE": "2"})


def lightning_child(env: dict, local_rank: int, world: int) -> dict:
    """What Lightning's launcher adds for a rank it starts (the parent's env is copied)."""
    return {
        **env,
        "LOCAL_RANK": str(local_rank),
        "NODE_RANK": "0",
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }


def test_one_task_slurm_job_lets_lightning_start_the_ranks_of_its_node():
    """The Snakemake SLURM profile runs a job as `srun -n1`: one task, every GPU of the job."""
    job = slurm(1, 1, 1, procid=0)
    parent = detect_cluster(devices=4, env=job)
    assert dataclasses.replace(parent, note=None) == ClusterInfo(
        environment="lightning",
        world_size=4,
        global_rank=0,
        local_rank=0,
        node_rank=0,
        num_nodes=1,
        devices=4,
        job_id="777",
    )
    assert "SLURM job 777 runs one task; Lightning started the 4 ranks" in parent.note
    # the ranks Lightning starts inherit SLURM_PROCID=0; their rank is LOCAL_RANK
    for local in range(4):
        child = detect_cluster(devices=4, env=lightning_child(job, local, 4))
        assert (child.environment, child.world_size, child.job_id) == ("lightning", 4, "777")
        assert child.global_rank == child.local_rank == local


def test_one_task_ranks_agree_with_lightning(clean_env):
    import lightning as L
    from lightning.pytorch.plugins.environments import LightningEnvironment, SLURMEnvironment
    from lightning_utilities.core.rank_zero import rank_zero_only

    clean_env.setattr(rank_zero_only, "rank", getattr(rank_zero_only, "rank", 0))
    for key, value in lightning_child(slurm(1, 1, 1, procid=0), 1, 2).items():
        clean_env.setenv(key, value)
    info = detect_cluster(devices=2)
    assert SLURMEnvironment.detect(), "Lightning would take SLURM's one task without the plugin"
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        plugins=[LightningEnvironment()],
        logger=False,
        enable_checkpointing=False,
    )
    assert isinstance(trainer.strategy.cluster_environment, LightningEnvironment)
    ranks = (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank)
    assert ranks == (info.world_size, info.global_rank, info.local_rank, info.node_rank)
    assert ranks == (2, 1, 1, 0)


def test_multi_node_run_in_one_task_names_the_fix():
    with pytest.raises(AsrflowError, match="runs 1 task") as err:
        detect_cluster(devices=4, num_nodes=2, env=slurm(1, 1, 1, procid=0))
    message = str(err.value)
    assert "one task per device started by srun" in message
    assert "srun --nodes 2 --ntasks-per-node 4" in message
    assert "launcher: srun" in message and "docs/slurm.md, 'Several nodes'" in message
    with pytest.raises(AsrflowError, match=r"spans 2 node\(s\) \(SLURM_NNODES\)"):
        detect_cluster(devices=2, num_nodes=1, env=slurm(1, 1, 2, procid=0))


def torchrun_env(rank: int, node: int, world: int, per_node: int = 2) -> dict:
    local = str(rank % per_node)
    return {"RANK": str(rank), "GROUP_RANK": str(node), "LOCAL_RANK": local,
            "LOCAL_WORLD_SIZE": str(per_node), "WORLD_SIZE": str(world)}  # fmt: skip


def test_torchrun_inside_a_slurm_job_is_torchrun():
    info = detect_cluster(2, 1, env={**slurm(1, 1, 1, procid=0), **torchrun_env(1, 0, 2)})
    assert (info.environment, info.global_rank, info.job_id) == ("torchelastic", 1, "777")


def test_torchrun_with_other_processes_per_node_names_the_fix():
    # 2 x 2 processes as the run wants, but 4 on one node: each node's share of the job differs
    env = torchrun_env(rank=3, node=0, world=4, per_node=4)
    with pytest.raises(AsrflowError, match=r"4 process\(es\) on this node \(LOCAL_WORLD_SIZE\)"):
        detect_cluster(2, 2, env=env)


@pytest.mark.parametrize(
    ("env", "devices", "nodes", "job_threads", "share"),
    [
        ({}, 1, 1, 4, 4),  # one process has the job to itself
        ({}, 4, 1, 8, 2),  # Lightning's launcher, before it starts the others
        (lightning_child({}, 3, 4), 4, 1, 8, 2),
        # a one-task SLURM job: the rank started by hand, and the ranks Lightning starts
        (slurm(1, 1, 1, procid=0), 4, 1, 8, 2),
        (lightning_child(slurm(1, 1, 1, procid=0), 0, 4), 4, 1, 8, 2),
        (lightning_child(slurm(1, 1, 1, procid=0), 3, 4), 4, 1, 8, 2),
        (slurm(8, 4, 2, procid=5), 4, 2, 8, 2),  # srun: the ranks of this node, not all 8
        (torchrun_env(rank=3, node=1, world=4), 2, 2, 6, 3),  # LOCAL_WORLD_SIZE 2
        ({}, 4, 1, 6, 1),  # rounded down
        ({}, 4, 1, 2, 1),  # fewer threads than ranks: still one each
    ],
)
def test_each_rank_gets_its_share_of_the_job_threads(env, devices, nodes, job_threads, share):
    """Snakemake gives the job cpus_per_device x devices threads; every rank of the node inherits
    the number, so each must take its share, not all of them."""
    assert threads_per_rank(job_threads, detect_cluster(devices, nodes, env=env)) == share


def test_threads_per_rank_refuses_a_job_without_threads():
    with pytest.raises(AsrflowError, match="at least 1 CPU thread, got 0"):
        threads_per_rank(0, detect_cluster(1, env={}))


@pytest.mark.parametrize(
    ("env", "devices", "nodes", "rank"),
    [
        ({}, 2, 1, 0),
        (slurm(1, 1, 1, procid=0), 1, 1, 0),
        (slurm(8, 4, 2, procid=0), 4, 2, 0),
        (slurm(8, 4, 2, procid=5), 4, 2, 5),
        (slurm(1, 1, 1, procid=0), 2, 1, 0),  # before Lightning started the other rank
        (lightning_child(slurm(1, 1, 1, procid=0), 0, 2), 2, 1, 0),  # ... and after
        (lightning_child(slurm(1, 1, 1, procid=0), 1, 2), 2, 1, 1),
        (lightning_child({}, 3, 4), 4, 1, 3),
        ({"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4"}, 2, 2, None),
        (torchrun_env(rank=2, node=1, world=4), 2, 2, 2),
    ],
)
def test_launched_rank_is_the_rank_detect_cluster_gives(env, devices, nodes, rank):
    """The job script's rank (log, record, work dir) before any Trainer, without the run's
    settings: 0 exactly for detect_cluster's rank 0, equal to it where the env says enough."""
    detected = detect_cluster(devices, nodes, env=env).global_rank
    assert (launched_rank(env) == 0) == (detected == 0)
    if rank is not None:
        assert launched_rank(env) == detected == rank


def test_launched_rank_reads_each_launcher():
    assert launched_rank({}) == 0
    assert launched_rank({"SLURM_PROCID": "3"}) == 3  # srun
    assert launched_rank({"RANK": "1", "SLURM_PROCID": "0"}) == 1  # torchrun inside SLURM
    assert launched_rank({"SLURM_PROCID": "0", "LOCAL_RANK": "1"}) == 1  # Lightning inside SLURM
    assert launched_rank({"LOCAL_RANK": "0", "NODE_RANK": "1"}) > 0  # another node's first


@pytest.mark.parametrize("name", ["bash", "interactive"])
def test_interactive_slurm_sessions_are_not_srun_launches(name: str):
    env = slurm(1, 1, 1, procid=0, SLURM_JOB_NAME=name)
    assert detect_cluster(2, 1, env=env).environment == "lightning"


@pytest.mark.parametrize(
    ("env", "devices", "nodes", "message"),
    [
        # two tasks for a 4-GPU run: srun was not told to start one task per GPU
        (slurm(2, 2, 1, 0), 4, 1, r"runs 2 task\(s\) \(SLURM_NTASKS\).*4 device\(s\) x 1 node"),
        (slurm(4, None, 1, 0), 4, 1, r"without SLURM_NTASKS_PER_NODE"),
        (slurm(4, 2, 2, 0), 4, 1, r"2 task\(s\) per node \(SLURM_NTASKS_PER_NODE\)"),
        # the right number of tasks, spread over two nodes for a one-node run
        (slurm(8, 4, 2, 0), 8, 1, r"runs 4 task\(s\) per node"),
        (slurm(4, 2, 1, 0), 2, 2, r"spans 1 node\(s\)"),
    ],
)
def test_a_launch_that_does_not_match_the_run_is_refused(env, devices, nodes, message):
    with pytest.raises(AsrflowError, match=message) as err:
        detect_cluster(devices, nodes, env=env)
    assert f"ntasks-per-node={devices}" in str(err.value)
    assert "SLURM job 777" in str(err.value)


def test_gpu_run_without_a_gpu_falls_back_to_cpu_fp32(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    kwargs = {"accelerator": "gpu", "precision": "bf16-mixed", "devices": 1, "max_steps": 5}
    with caplog.at_level(logging.WARNING):
        out, warning = cpu_fallback(kwargs)
    assert out == {**kwargs, "accelerator": "cpu", "precision": "32-true"}
    assert "TRAINING ON THE CPU" in warning and "CUDA_VISIBLE_DEVICES=0" in warning
    assert "TRAINING ON THE CPU" in caplog.text
    assert cpu_fallback({"accelerator": "cpu", "precision": "32-true"})[1] is None
    assert cpu_fallback({"accelerator": "auto"})[1] is None  # Lightning picks the CPU itself
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cpu_fallback(kwargs) == (kwargs, None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("tiny"))


def test_gpu_job_on_a_fake_gres_slurm_node_trains_on_the_cpu(tiny, tmp_path, clean_env, caplog):
    """A CI SLURM node advertising fake GPU GRES: one task, CUDA_VISIBLE_DEVICES, no CUDA."""
    for key, value in slurm(1, 1, 1, procid=0).items():
        clean_env.setenv(key, value)
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0")
    clean_env.setattr(torch.cuda, "is_available", lambda: False)
    spec = with_overrides(tiny, {"trainer": {"accelerator": "gpu", "precision": "bf16-mixed"}})
    with caplog.at_level(logging.INFO):
        summary = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert summary["status"] == "completed"
    assert summary["accelerator"] == "cpu" and summary["precision"] == "32-true"
    assert "TRAINING ON THE CPU" in summary["accelerator_fallback"]
    assert summary["cluster"]["environment"] == "slurm" and summary["cluster"]["job_id"] == "777"
    assert "slurm launch, rank 0 of 1" in caplog.text


def test_train_run_refuses_a_mismatched_launch_before_training(tiny, tmp_path, clean_env):
    for key, value in slurm(2, 2, 1, procid=0).items():
        clean_env.setenv(key, value)
    with pytest.raises(AsrflowError, match="ntasks-per-node=1"):
        train_run(tiny, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    import json

    work = json.loads((tmp_path / "work/summary.json").read_text(encoding="utf-8"))
    assert work["status"] == "failed" and work["failure"] is None
    assert not (tmp_path / "out").exists()


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("local_rank", [None, 1])
def test_train_run_sets_each_rank_to_its_share_of_the_threads(
    tiny, tmp_path, clean_env, caplog, torch_threads, local_rank
):
    """A CPU run of 2 devices in a one-task SLURM job of 6 threads: 3 threads for the rank
    started by hand and for the one Lightning's launcher starts (stopped before training)."""
    import asrflow.train.run.runner

    env = slurm(1, 1, 1, procid=0)
    if local_rank is not None:
        env = lightning_child(env, local_rank, 2)
    for key, value in env.items():
        clean_env.setenv(key, value)
    clean_env.setenv("OMP_NUM_THREADS", "6")  # what Snakemake sets
    clean_env.setattr(asrflow.train.run.runner, "claim_work_dir", lambda *a, **k: None)

    def stop(*args, **kwargs):
        raise RuntimeError("stopped before training")

    clean_env.setattr(asrflow.train.run.runner, "build_trainer_parts", stop)
    torch.set_num_threads(6)
    with caplog.at_level(logging.INFO), pytest.raises(RuntimeError, match="stopped"):
        train_run(
            tiny,
            tmp_path / "work",
            tmp_path / "out",
            tmp_path / "summary.json",
            threads=6,
            devices=2,
            accelerator="cpu",
        )
    assert torch.get_num_threads() == 3
    assert os.environ["OMP_NUM_THREADS"] == "3"  # inherited by the ranks Lightning starts
    rank = local_rank or 0
    assert f"rank {rank} uses 3 CPU thread(s) (the job's 6 over 2 rank(s) on this node)" in (
        caplog.text
    )


def test_a_train_sampler_sharded_for_another_rank_is_refused():
    """The Trainer keeps asrflow's sampler: one built for rank 0 in a rank-1 process would train
    both ranks on the same batches, so the module's setup refuses it, naming both ranks."""
    loader = type("Loader", (), {"sampler": type("S", (), {"world_size": 2, "rank": 0})()})()
    check_sampler_rank(loader, world_size=2, rank=0)
    check_sampler_rank(object(), world_size=2, rank=1)  # no sampler: nothing to check
    with pytest.raises(AsrflowError, match="sharded for rank 0 of 2 but this process is rank 1"):
        check_sampler_rank(loader, world_size=2, rank=1)
    with pytest.raises(AsrflowError, match="rank 0 of 2 but this process is rank 0 of 1"):
        check_sampler_rank(loader, world_size=1, rank=0)
