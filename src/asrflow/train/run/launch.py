"""Training on several nodes: one SLURM task per device, started by ``srun`` from the train job.

snakemake-executor-plugin-slurm runs a job as one task (``srun -n1``), and Lightning's launcher,
which starts the other ranks inside that task, reaches only the task's node. A run over several
nodes (or one that asks for it: ``runs.<run>.resources.launcher: srun``) is therefore submitted
as an MPI-style job: :func:`train_resources` gives the train rule ``mpi``, ``nodes`` and one task
per device (sbatch ``--nodes N --ntasks-per-node D``), the plugin then runs the job's script once,
in the batch step on the first node, and that script calls :func:`srun_train`, which starts
``srun --nodes N --ntasks-per-node D python -m asrflow.train.run.launch <job.json>``. Every task is
a rank (Lightning's ``SLURMEnvironment`` reads ``SLURM_PROCID``, see
:func:`asrflow.train.cluster.detect_cluster`) and runs :func:`asrflow.train.run.runner.train_run`;
rank 0 writes the summary and the outputs, as in the one-task launch. Each rank ``R`` logs to
``<job log stem>.rank<R>.log`` (``logs/train/big.rank0.log`` too: the job's own log belongs to
the launching process, which writes the provenance record once srun has succeeded).

Example::

    train_resources({"devices": 4, "nodes": 2, "cpus_per_device": 8, "launcher": "auto"})
    # {'gpu': 8, 'nodes': 2, 'mpi': 'srun', 'tasks_per_node': 4, 'cpus_per_task': 8, ...}
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.io import write_json
from asrflow.train.spec import RunSpec, spec_from_json, spec_to_json
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


LAUNCHERS = ("auto", "lightning", "srun")
"""``runs.<run>.resources.launcher``: ``auto`` is ``srun`` on several nodes, else ``lightning``."""

SRUN = "srun"


def launcher(resources: Mapping[str, Any]) -> str:
    """How a run's ranks are started, ``lightning`` (one task, Lightning's launcher) or ``srun``
    (one task per device); :class:`AsrflowError` for a launch that cannot work. ``resources``:
    ``runs.<run>.resources`` of a validated config (the schema fills in the defaults).

    >>> launcher({"devices": 4, "nodes": 2, "launcher": "auto"})
    'srun'
    """
    chosen = resources["launcher"]
    nodes = int(resources["nodes"])
    per_node = max(1, int(resources["devices"]))
    if chosen not in LAUNCHERS:
        raise AsrflowError(f"launcher {chosen!r} is not one of {', '.join(LAUNCHERS)}")
    if chosen == "auto":
        chosen = SRUN if nodes > 1 else "lightning"
    if chosen == "lightning" and nodes > 1:
        raise AsrflowError(
            f"launcher lightning cannot span {nodes} nodes (Lightning starts the ranks of one "
            "node only); use launcher srun (or auto) for a run over several nodes"
        )
    if chosen == SRUN and nodes * per_node == 1:
        raise AsrflowError(
            "launcher srun for a run of one process (1 node, at most 1 device): there are no "
            "ranks to start; use launcher auto"
        )
    return chosen


def train_resources(resources: Mapping[str, Any]) -> dict[str, int | str | None]:
    """The SLURM resources of a train job from ``runs.<run>.resources`` (of a validated config,
    as :func:`launcher`); ``None`` means unset.

    One-task launch (as before): ``gpu`` = devices, ``cpus_per_gpu``, ``nodes`` = 1. srun
    launch: ``gpu`` = devices x nodes (the plugin's ``--gpus`` counts the whole job's GPUs),
    ``mpi`` (the plugin then runs the job without ``srun -n1``), ``nodes``, one task per device
    (``tasks_per_node``; ``tasks`` = nodes with one device per node, since the plugin refuses
    ``tasks_per_node`` 1, and ``tasks_per_gpu`` 0 so that it adds no ``--ntasks-per-gpu``) and
    ``cpus_per_task`` = cpus_per_device.
    """
    devices = int(resources["devices"])
    nodes = int(resources["nodes"])
    cpus = int(resources["cpus_per_device"])
    unset: dict[str, int | str | None] = dict.fromkeys(
        ("mpi", "tasks_per_node", "tasks", "tasks_per_gpu", "cpus_per_task")
    )
    if launcher(resources) != SRUN:
        return {**unset, "gpu": devices, "cpus_per_gpu": cpus, "nodes": nodes}
    per_node = max(1, devices)
    out: dict[str, int | str | None] = {
        **unset,
        "gpu": devices * nodes,
        "cpus_per_gpu": None,
        "nodes": nodes,
        "mpi": SRUN,
        "cpus_per_task": cpus,
    }
    if per_node > 1:
        out["tasks_per_node"] = per_node
    else:
        out.update(tasks=nodes, tasks_per_gpu=0 if devices else None)
    return out


@dataclass(frozen=True)
class SrunLaunch:
    """The shape of an srun launch: ``nodes`` x ``tasks_per_node`` ranks."""

    nodes: int
    tasks_per_node: int
    cpus_per_task: int | None = None

    @classmethod
    def from_job(cls, resources: Mapping[str, Any]) -> SrunLaunch | None:
        """The launch a job's resources (:func:`train_resources`) ask for; ``None`` for the
        one-task launch."""
        # a job's resources, not the config's: Snakemake drops the ones train_resources leaves
        # unset (None), so absence is meaningful here
        if resources.get("mpi") != SRUN:
            return None
        nodes = int(resources.get("nodes") or 1)
        per_node = resources.get("tasks_per_node") or int(resources.get("tasks") or 1) // nodes
        cpus = resources.get("cpus_per_task")
        return cls(nodes, int(per_node), int(cpus) if cpus else None)

    def command(self, job_file: Pathlike, python: str | None = None) -> list[str]:
        """``srun`` starting one worker (:func:`main`) per rank.

        >>> SrunLaunch(2, 4, 8).command("w.json", python="python")  # doctest: +NORMALIZE_WHITESPACE
        ['srun', '--nodes', '2', '--ntasks-per-node', '4', '--kill-on-bad-exit=1',
         '--cpus-per-task', '8', 'python', '-m', 'asrflow.train.run.launch', 'w.json']
        """
        cmd = [SRUN, "--nodes", str(self.nodes), "--ntasks-per-node", str(self.tasks_per_node)]
        # one rank failing ends the others (they would wait in a collective otherwise)
        cmd.append("--kill-on-bad-exit=1")
        if self.cpus_per_task:
            cmd += ["--cpus-per-task", str(self.cpus_per_task)]
        return [*cmd, python or sys.executable, "-m", "asrflow.train.run.launch", str(job_file)]


def job_file(work_dir: Pathlike) -> Path:
    """Where the launching process writes what the ranks run: beside the work directory, which
    rank 0 may move aside (:func:`asrflow.train.run.workdir.claim_work_dir`) while others read."""
    work = Path(work_dir)
    return work.with_name(f"{work.name}.srun.json")


def write_job(
    path: Pathlike,
    spec: RunSpec,
    work_dir: Pathlike,
    out_dir: Pathlike,
    summary_path: Pathlike,
    *,
    threads: int | None,
    log_path: Pathlike | None,
) -> Path:
    """Write the worker's job: the run spec, the paths (absolute) and the job's threads."""
    job = {
        "spec": json.loads(spec_to_json(spec)),
        "work_dir": str(Path(work_dir).absolute()),
        "out_dir": str(Path(out_dir).absolute()),
        "summary_path": str(Path(summary_path).absolute()),
        "threads": threads,
        "log": str(Path(log_path).absolute()) if log_path else None,
    }
    write_json(path, job)
    return Path(path)


def read_job(path: Pathlike) -> dict[str, Any]:
    """A job :func:`write_job` wrote, its ``spec`` a :class:`RunSpec` again."""
    job = json.loads(Path(path).read_text(encoding="utf-8"))
    job["spec"] = spec_from_json(json.dumps(job["spec"]))
    return job


def rank_logs(log_path: Pathlike | None) -> str:
    """Where the ranks log, for messages: ``logs/train/a.rank<R>.log``."""
    if not log_path:
        return "the job's SLURM log (the ranks' stderr)"
    path = Path(log_path)
    return str(path.with_name(f"{path.stem}.rank<R>{path.suffix}"))


def srun_train(
    launch: SrunLaunch,
    spec: RunSpec,
    work_dir: Pathlike,
    out_dir: Pathlike,
    summary_path: Pathlike,
    *,
    threads: int | None = None,
    log_path: Pathlike | None = None,
    python: str | None = None,
    run: Any = subprocess.run,
) -> None:
    """Train ``spec`` with one srun task per rank and wait; :class:`AsrflowError` when srun
    fails (a rank failed, was killed or never started). ``threads``: the job's CPU threads on
    each node. ``run`` is :func:`subprocess.run` (a test may pass another)."""
    if run is subprocess.run and shutil.which(SRUN) is None:
        raise AsrflowError(
            f"run {spec.name} is to start its ranks with srun (runs.<run>.resources: launcher "
            "srun, or nodes > 1), but there is no srun here: run it through the SLURM profile "
            "(docs/slurm.md), or set launcher: lightning on one node"
        )
    path = write_job(
        job_file(work_dir),
        spec,
        work_dir,
        out_dir,
        summary_path,
        threads=threads,
        log_path=log_path,
    )
    command = launch.command(path, python)
    log.info(
        "run %s: %d rank(s) on %d node(s), one srun task each: %s; ranks log to %s",
        spec.name,
        launch.nodes * launch.tasks_per_node,
        launch.nodes,
        shlex.join(command),
        rank_logs(log_path),
    )
    with _waiting_through_sigterm(spec.name) as received:
        code = run(command, check=False).returncode
    if received:
        raise AsrflowError(
            f"run {spec.name} got SIGTERM (a time limit, scancel or preemption) and its ranks "
            f"stopped (srun exit code {code}); rank 0 saved {Path(work_dir) / 'checkpoints'}"
            f"/last.ckpt at its last step (see {Path(work_dir) / 'summary.json'}): rerun the job "
            "to resume from it"
        )
    if code != 0:
        raise AsrflowError(
            f"run {spec.name}: srun of {launch.nodes * launch.tasks_per_node} rank(s) failed "
            f"with exit code {code} ({shlex.join(command)}); see the ranks' logs "
            f"{rank_logs(log_path)} and the job's SLURM log for why, and "
            f"{Path(work_dir) / 'summary.json'} for a failure rank 0 recorded"
        )
    log.info("run %s: all ranks finished", spec.name)


@contextlib.contextmanager
def _waiting_through_sigterm(name: str) -> Iterator[list[int]]:
    """While the job's srun runs: a SIGTERM to this (batch) process is noted, not obeyed.

    SLURM signals every step of a cancelled or timed-out job, and srun passes the signal on to
    the ranks, which save ``last.ckpt`` at the end of their batch. The batch step must outlive
    them: once it exits the job is over and SLURM kills the ranks' step, saved or not. Yields
    the list of signals received."""
    received: list[int] = []

    def note(signum: int, _frame: Any) -> None:
        if not received:
            log.warning("run %s: SIGTERM; waiting for the ranks to save and stop", name)
        received.append(signum)

    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGTERM, note)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def worker(job_path: Pathlike, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One rank of an srun launch: logging to its own file, then
    :func:`~asrflow.train.run.runner.train_run`."""
    # the training stack, in the rank process only: never while the DAG is built
    from asrflow.ranks import launched_rank
    from asrflow.train.run.runner import train_run
    from asrflow.workflow import LOG_FORMAT, rank_log

    job = read_job(job_path)
    rank = launched_rank(env)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if job["log"]:
        path = rank_log(job["log"], rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path, mode="w", encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    log.info("run %s: rank %d of an srun launch (%s)", job["spec"].name, rank, job_path)
    try:
        return train_run(
            job["spec"],
            job["work_dir"],
            job["out_dir"],
            job["summary_path"],
            threads=job["threads"],
        )
    except AsrflowError as exc:
        log.error("run %s failed on rank %d: %s", job["spec"].name, rank, exc)
        raise
    except BaseException:
        log.exception("run %s failed on rank %d", job["spec"].name, rank)
        raise
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrflow.train.run.launch <job.json>``: what srun starts on every rank."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m asrflow.train.run.launch <job.json>\n")
        return 2
    try:
        worker(args[0])
    except BaseException:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
