"""Where a training process runs: its rank among the others, and the hardware it really has.

Three ways a run's processes get started, and where each process reads its rank from:

- ``srun`` starts one task per device (``--ntasks-per-node`` = devices per node, ``--nodes`` =
  nodes); Lightning's ``SLURMEnvironment`` reads ``SLURM_PROCID``/``SLURM_LOCALID``/
  ``SLURM_NODEID``. The only way to train on several nodes under SLURM (through the Snakemake
  SLURM profile: :mod:`asrflow.train.run.launch`).
- ``torchrun`` sets ``RANK``/``LOCAL_RANK``/``GROUP_RANK`` (``TorchElasticEnvironment``).
- Lightning's own launcher: the process started by hand is rank 0 and starts the others on its
  node by running ``sys.argv`` again with ``LOCAL_RANK`` set (``LightningEnvironment``). This is
  also how a SLURM job with *one* task trains on several GPUs of its node: the Snakemake SLURM
  profile runs every job as ``srun -n1``, so a ``devices: 4`` run gets one task and four GPUs.
  Under a Snakemake ``script:`` the children run the whole job script again (see
  :func:`asrflow.ranks.launched_rank`).

:func:`detect_cluster` tells, before the ``Trainer`` exists, which of these Lightning is to use
(the runner hands it the same environment as a plugin), so that the data sampler is sharded for
the rank Lightning gives the process, the summary records the launch, and a job whose tasks do not
match the recipe's ``devices x num_nodes`` fails at once with a message that says what to change
(instead of hanging in the first collective).

:func:`threads_per_rank` shares the job's CPU cores among the ranks on its node: Snakemake sets
``OMP_NUM_THREADS`` to the job's threads (``cpus_per_device`` x devices) and every rank inherits
it.

:func:`cpu_fallback` turns a run that asks for a GPU on a machine without a usable one (a CI node
with fake GPU GRES, a broken driver) into a CPU run in fp32, with a loud warning.

Example::

    info = detect_cluster(devices=4, num_nodes=2)   # inside `srun` with 8 tasks
    info.world_size, info.global_rank, info.local_rank, info.node_rank
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from asrflow.errors import AsrflowError
from asrflow.ranks import env_int

log = logging.getLogger(__name__)

GPU_ACCELERATORS = ("gpu", "cuda")


@dataclass(frozen=True)
class ClusterInfo:
    """The distributed setup of this process, as Lightning will see it."""

    environment: str
    """``slurm`` (srun started every rank), ``torchelastic`` or ``lightning`` (Lightning starts
    the processes itself, also inside a one-task SLURM job)."""
    world_size: int
    global_rank: int
    local_rank: int
    node_rank: int
    num_nodes: int
    devices: int
    """Processes (devices) per node: the ranks on this process's node (checked against
    ``SLURM_NTASKS_PER_NODE`` and ``LOCAL_WORLD_SIZE`` where the launcher sets them)."""
    job_id: str | None = None
    """The SLURM job the processes run in (whoever started them)."""
    note: str | None = None
    """How the processes came to be, where ``environment`` alone does not say it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slurm_job_id(env: Mapping[str, str]) -> str | None:
    """The SLURM job this process runs in (an array job's own ID), or ``None`` outside SLURM."""
    return env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID")


def _slurm_detected(env: Mapping[str, str]) -> bool:
    # Lightning's SLURMEnvironment.detect(): srun sets SLURM_NTASKS; a job named bash or
    # interactive is an interactive session whose processes something else starts
    return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")


def _torchelastic_detected(env: Mapping[str, str]) -> bool:
    return all(k in env for k in ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))


def detect_cluster(
    devices: int, num_nodes: int = 1, env: Mapping[str, str] | None = None
) -> ClusterInfo:
    """This process's place in the run; :class:`AsrflowError` when the launch does not match.

    ``devices``/``num_nodes`` are the trainer's (``trainer.devices``, ``trainer.num_nodes``,
    filled from ``runs.<run>.resources``). ``torchrun`` comes first, as in Lightning (it can run
    inside a SLURM job). Under SLURM the job either runs one task per device
    (``SLURM_NTASKS`` = devices x nodes, ``SLURM_NTASKS_PER_NODE`` = devices,
    ``SLURM_NNODES`` = nodes) or, on one node, a single task in which Lightning starts the
    other ranks (environment ``lightning``).
    """
    env = os.environ if env is None else env
    if _torchelastic_detected(env):
        return _torchelastic_cluster(devices, num_nodes, env)
    if _slurm_detected(env):
        return _slurm_cluster(devices, num_nodes, env)
    # Lightning's own launcher: this process is local rank 0 and starts the others, which it
    # marks with LOCAL_RANK (and NODE_RANK on other nodes)
    local = env_int(env, "LOCAL_RANK", 0)
    node = env_int(env, "NODE_RANK", env_int(env, "GROUP_RANK", 0))
    return ClusterInfo(
        environment="lightning",
        world_size=devices * num_nodes,
        global_rank=node * devices + local,
        local_rank=local,
        node_rank=node,
        num_nodes=num_nodes,
        devices=devices,
    )


def _torchelastic_cluster(devices: int, num_nodes: int, env: Mapping[str, str]) -> ClusterInfo:
    """The ranks ``torchrun`` set, once its process counts match the run's."""
    expected = devices * num_nodes
    world = env_int(env, "WORLD_SIZE", 1)
    fix = f"use --nproc-per-node {devices} --nnodes {num_nodes}"
    if world != expected:
        raise AsrflowError(
            f"torchrun started {world} process(es) but the run trains on {devices} device(s) "
            f"x {num_nodes} node(s) = {expected}; {fix}"
        )
    per_node = env_int(env, "LOCAL_WORLD_SIZE", devices)
    if per_node != devices:
        raise AsrflowError(
            f"torchrun started {per_node} process(es) on this node (LOCAL_WORLD_SIZE) but the "
            f"run trains on {devices} device(s) per node; {fix}"
        )
    return ClusterInfo(
        environment="torchelastic",
        world_size=world,
        global_rank=env_int(env, "RANK", 0),
        local_rank=env_int(env, "LOCAL_RANK", 0),
        node_rank=env_int(env, "GROUP_RANK", 0),
        num_nodes=num_nodes,
        devices=devices,
        job_id=_slurm_job_id(env),
    )


def _slurm_cluster(devices: int, num_nodes: int, env: Mapping[str, str]) -> ClusterInfo:
    """The ranks ``srun`` set, once the job's tasks match the run's devices and nodes (a job
    with one task for several devices: :func:`_one_task_job`)."""
    expected = devices * num_nodes
    ntasks = env_int(env, "SLURM_NTASKS", 1)
    per_node = env_int(env, "SLURM_NTASKS_PER_NODE", ntasks)
    nnodes = env_int(env, "SLURM_NNODES", 1)
    job = _slurm_job_id(env)
    where = f"SLURM job {job}" if job else "this SLURM job"
    fix = (
        f"start it with one task per device: nodes={num_nodes} and ntasks-per-node={devices} "
        f"(srun --nodes {num_nodes} --ntasks-per-node {devices}), or change the run's "
        "resources (devices, nodes) to match the allocation"
    )
    if ntasks == 1 and expected > 1:
        return _one_task_job(devices, num_nodes, nnodes, where, job, env)
    if ntasks != expected:
        raise AsrflowError(
            f"{where} runs {ntasks} task(s) (SLURM_NTASKS) but the run trains on {devices} "
            f"device(s) x {num_nodes} node(s) = {expected} processes; {fix}"
        )
    if expected > 1 and "SLURM_NTASKS_PER_NODE" not in env:
        raise AsrflowError(
            f"{where} runs {ntasks} tasks without SLURM_NTASKS_PER_NODE (the job was "
            f"submitted with --ntasks only); {fix}"
        )
    if per_node != devices:
        raise AsrflowError(
            f"{where} runs {per_node} task(s) per node (SLURM_NTASKS_PER_NODE) but the run "
            f"trains on {devices} device(s) per node; {fix}"
        )
    if nnodes != num_nodes:
        raise AsrflowError(
            f"{where} spans {nnodes} node(s) (SLURM_NNODES) but the run trains on "
            f"{num_nodes}; {fix}"
        )
    return ClusterInfo(
        environment="slurm",
        world_size=ntasks,
        global_rank=env_int(env, "SLURM_PROCID", 0),
        local_rank=env_int(env, "SLURM_LOCALID", 0),
        node_rank=env_int(env, "SLURM_NODEID", 0),
        num_nodes=nnodes,
        devices=per_node,
        job_id=job,
    )


def _one_task_job(
    devices: int, num_nodes: int, nnodes: int, where: str, job: str | None, env: Mapping[str, str]
) -> ClusterInfo:
    """A SLURM job with one task for a run of several devices: Lightning starts the other ranks
    of the node inside the task (what the Snakemake SLURM profile's ``srun -n1`` gives)."""
    expected = devices * num_nodes
    if num_nodes > 1:
        raise AsrflowError(
            f"{where} runs 1 task (SLURM_NTASKS) but the run trains on {devices} device(s) x "
            f"{num_nodes} node(s) = {expected} processes: Lightning can start the ranks of one "
            "node inside a single task, but a run over several nodes needs one task per device "
            f"started by srun (srun --nodes {num_nodes} --ntasks-per-node {devices}); through "
            "the Snakemake SLURM profile, give the run launcher: srun (or auto, the default) in "
            "runs.<run>.resources, and the train job starts its ranks that way "
            "(asrflow.train.run.launch; docs/slurm.md, 'Several nodes')"
        )
    if nnodes != 1:
        raise AsrflowError(
            f"{where} runs 1 task but spans {nnodes} node(s) (SLURM_NNODES); Lightning starts "
            f"the run's {devices} processes on the task's node only: ask for one node"
        )
    local = env_int(env, "LOCAL_RANK", 0)
    return ClusterInfo(
        environment="lightning",
        world_size=devices,
        global_rank=local,
        local_rank=local,
        node_rank=0,
        num_nodes=1,
        devices=devices,
        job_id=job,
        note=(
            f"{where} runs one task; Lightning started the {devices} ranks inside it (ranks from "
            "LOCAL_RANK, not SLURM_PROCID)"
        ),
    )


def threads_per_rank(job_threads: int, cluster: ClusterInfo) -> int:
    """CPU threads for one rank: its equal share of the job's ``job_threads`` among the ranks on
    its node (``cluster.devices``), at least 1.

    Every rank computes its own share, also the ranks Lightning's launcher starts by running the
    job script again (they inherit the job's threads and ``OMP_NUM_THREADS``).

    >>> threads_per_rank(8, detect_cluster(devices=4, env={}))
    2
    """
    if job_threads < 1:
        raise AsrflowError(f"a job needs at least 1 CPU thread, got {job_threads}")
    return max(1, job_threads // max(1, cluster.devices))


def cpu_fallback(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Trainer kwargs that run on the CPU (fp32) when they ask for a GPU that is not usable.

    Returns the kwargs and the warning (``None`` when nothing changed). A SLURM node with fake
    GPU GRES sets ``CUDA_VISIBLE_DEVICES`` although there is no GPU; Lightning would stop with
    "No supported gpu backend found!".
    """
    out = dict(kwargs)
    if str(out.get("accelerator", "auto")) not in GPU_ACCELERATORS or torch.cuda.is_available():
        return out, None
    precision = str(out.get("precision", "32-true"))
    out.update(accelerator="cpu", precision="32-true")
    message = (
        f"the run asks for accelerator {kwargs.get('accelerator')!r} but no CUDA GPU is usable "
        f"here (torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}): TRAINING ON THE CPU instead, "
        f"in 32-true precision (recipe asked {precision}), with {out.get('devices', 1)} "
        "process(es) per node; this is slow and only meant for tests"
    )
    log.warning(message)
    return out, message


def check_sampler_rank(train_loader: Any, world_size: int, rank: int) -> None:
    """Fail unless the train batches are sharded for this process's rank: the Trainer does not
    replace asrflow's sampler (``use_distributed_sampler=False``), so a launcher that gives a
    process another rank than the one its sampler was built for would have ranks train on the
    same batches. ``train_loader`` is what the module trains from (a loader whose ``sampler``
    says its ``world_size`` and ``rank``); one without a sampler passes."""
    sampler = getattr(train_loader, "sampler", None)
    if sampler is None:
        return
    shard = (getattr(sampler, "world_size", 1), getattr(sampler, "rank", 0))
    if shard != (world_size, rank):
        raise AsrflowError(
            f"the train sampler is sharded for rank {shard[1]} of {shard[0]} but this process "
            f"is rank {rank} of {world_size}: ranks would train on the same batches; the "
            "launcher is not one asrflow supports (use the ddp strategy under srun, torchrun or "
            "Lightning's own launcher, not ddp_spawn)"
        )
