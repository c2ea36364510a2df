"""One training run, start to finish: what the ``train`` rule (and the smoke run) calls.

The parts the Trainer is given are built by :mod:`asrflow.train.loop.parts`; how the run ended is
written by :mod:`asrflow.train.run.outcome`; the batch audit and the smoke run before it are in
:mod:`asrflow.train.preflight.smoke`.

The working directory (``results/work/<run>/``) is deliberately *not* a declared Snakemake output:
Snakemake deletes a failed job's outputs before rerunning it, and a killed or preempted job must
find its checkpoints again. A rerun resumes from ``<work>/checkpoints/last.ckpt`` (weights,
optimizer, scheduler, global step and the position in the epoch's batch order). When training
finishes, the kept checkpoints, logs and diagnostics are linked into the declared output
directory and the summary is written.

How a run can end (:mod:`asrflow.train.loop.failures`):

- ``status: completed``: checkpoints, logs and diagnostics in the output directory;
- ``status: failed`` with ``failure: diverged`` or ``out_of_memory``: a result of the recipe. The
  summary goes to the declared summary file, to ``<work>/summary.json`` and (a copy) into the
  otherwise empty output directory, and :func:`train_run` *returns*, so the job succeeds and
  the failed run is listed beside the others;
- ``status: preempted`` (SIGTERM): ``last.ckpt`` is saved, ``<work>/summary.json`` written and
  :class:`~asrflow.train.loop.failures.TrainingPreempted` raised, so the job fails and its retry
  resumes;
- ``status: failed`` with ``failure: null`` (any other exception, Ctrl-C): ``<work>/summary.json``
  is written and the exception re-raised, so the job fails and can be retried.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.environments import LightningEnvironment, SLURMEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from asrflow.artifacts import CHECKPOINTS
from asrflow.artifacts import LAST_CHECKPOINT as LAST
from asrflow.data.shards import INDEX as SHARD_INDEX
from asrflow.data.shards import read_index
from asrflow.hashing import sha256_file
from asrflow.ranks import launched_rank
from asrflow.recipe.load import effective_batch_seconds, update_budget
from asrflow.recipe.rules import RULES_VERSION
from asrflow.recipe.sections import Recipe
from asrflow.text import TextNormalization
from asrflow.train.cluster import ClusterInfo, cpu_fallback, detect_cluster, threads_per_rank
from asrflow.train.loop.failures import PreemptionCheckpoint, RankFailures, TrainingPreempted
from asrflow.train.loop.parts import build_trainer_parts
from asrflow.train.loop.progress import progress_settings
from asrflow.train.loop.resume import resume_checkpoint
from asrflow.train.loop.trainer import trainer_kwargs
from asrflow.train.run.outcome import record_completion, record_failure, record_preemption
from asrflow.train.run.workdir import claim_work_dir, run_identity
from asrflow.train.spec import RunSpec
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


def _hashes(spec: RunSpec, recipe: Recipe) -> dict[str, Any]:
    shards = {str(p): sha256_file(Path(p) / SHARD_INDEX) for p in spec.train_shards}
    return {
        "train_cuts": {str(p): sha256_file(p) for p in spec.train_cuts},
        **({"train_shards": shards} if shards else {}),  # shards.json names each file's hash
        "dev_cuts": sha256_file(spec.dev_cuts),
        "bpe_model": sha256_file(spec.bpe_model),
        "tokens": sha256_file(spec.tokens),
        "recipe": recipe.identity_sha256(sharded=bool(spec.train_shards)),
        "normalization": TextNormalization.from_dict(spec.normalization).sha256(),
        "start_weights": None,
    }


def _shard_sizes(spec: RunSpec) -> dict[str, int]:
    """``shard_size`` of each train shard directory of a sharded run (empty for per-file ones)."""
    return {str(p): int(read_index(p)["shard_size"]) for p in spec.train_shards}


def _log_cluster(name: str, cluster: ClusterInfo, kwargs: Mapping[str, Any]) -> None:
    log.info(
        "run %s: %s launch, rank %d of %d (local rank %d, node %d of %d, %d device(s) per "
        "node%s); accelerator %s, precision %s%s",
        name,
        cluster.environment,
        cluster.global_rank,
        cluster.world_size,
        cluster.local_rank,
        cluster.node_rank,
        cluster.num_nodes,
        cluster.devices,
        f", job {cluster.job_id}" if cluster.job_id else "",
        kwargs.get("accelerator"),
        kwargs.get("precision"),
        f"; {cluster.note}" if cluster.note else "",
    )


def _use_threads(name: str, job_threads: int, cluster: ClusterInfo) -> int:
    """Give this rank its share of the job's CPU threads (:func:`threads_per_rank`)."""
    threads = threads_per_rank(job_threads, cluster)
    torch.set_num_threads(threads)
    # as Lightning does where OMP_NUM_THREADS is unset: the ranks its launcher starts from here
    # then start with their share, not the job's threads that Snakemake put there
    os.environ["OMP_NUM_THREADS"] = str(threads)
    log.info(
        "run %s: rank %d uses %d CPU thread(s) (the job's %d over %d rank(s) on this node)",
        name,
        cluster.global_rank,
        threads,
        job_threads,
        cluster.devices,
    )
    return threads


def _launch(
    name: str,
    recipe: Recipe,
    overrides: dict[str, Any],
    threads: int | None,
    summary: dict[str, Any],
) -> tuple[dict[str, Any], ClusterInfo]:
    """The Trainer's settings (the recipe's, the caller's over them; the CPU where no GPU is)
    and where this process stands in the cluster; recorded in ``summary`` and the log."""
    kwargs, fallback = cpu_fallback({**trainer_kwargs(recipe), **overrides})
    cluster = detect_cluster(int(kwargs.get("devices", 1)), int(kwargs.get("num_nodes", 1)))
    summary.update(
        cluster=cluster.to_dict(),
        accelerator=kwargs.get("accelerator"),
        accelerator_fallback=fallback,
    )
    _log_cluster(name, cluster, kwargs)
    if threads is not None:
        _use_threads(name, threads, cluster)
    _environment_plugins(cluster, kwargs)
    return kwargs, cluster


def _environment_plugins(cluster: ClusterInfo, kwargs: dict[str, Any]) -> None:
    """The strategy and cluster plugin Lightning gets for ``cluster`` (unless given)."""
    if cluster.world_size > 1:
        kwargs.setdefault("strategy", "ddp")
    if cluster.environment == "slurm":
        # Snakemake retries failed jobs: no `scontrol requeue` behind its back on SIGUSR1
        kwargs.setdefault("plugins", [SLURMEnvironment(auto_requeue=False)])
    elif cluster.environment == "lightning":
        # Lightning would pick SLURMEnvironment in any SLURM job and take one task's rank:
        # inside a one-task job its own launcher starts the ranks, which read LOCAL_RANK as
        # detect_cluster (and so the sampler's shard) did
        kwargs.setdefault("plugins", [LightningEnvironment()])


def _first_summary(spec: RunSpec, recipe: Recipe) -> dict[str, Any]:
    """What a run's summary says before it starts: recipe, budget, the hashes of its inputs."""
    return {
        "run": spec.name,
        "status": "running",
        "failure": None,
        "recipe": spec.recipe_name,
        "recipe_settings": recipe.identity(sharded=bool(spec.train_shards)),
        "update_budget": update_budget(recipe),
        # recipe: auto: every derived value with its reason (asrflow.recipe.plan)
        "plan": _plan_record(spec.plan),
        "effective_batch_seconds": effective_batch_seconds(recipe),
        "hashes": _hashes(spec, recipe),
        "init": dict(spec.init) if spec.init else None,
        # init.architecture: package: the config its model keys came from
        "architecture": dict(spec.architecture) if spec.architecture else None,
        "host": platform.node(),
    }


def _plan_record(plan: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a summary records of a run's plan: its statistics and choices (not the values
    again: ``recipe_settings`` holds them as trained)."""
    if plan is None:
        return None
    return {"rules_version": RULES_VERSION, "stats": plan["stats"], "choices": plan["choices"]}


def train_run(
    spec: RunSpec,
    work_dir: Pathlike,
    out_dir: Pathlike,
    summary_path: Pathlike,
    *,
    threads: int | None = None,
    **trainer_overrides: Any,
) -> dict[str, Any]:
    """Train (or resume) one run; returns and writes the run summary.

    Returns normally when the run completes and when it fails as a result of its recipe
    (diverged, out of memory); raises on preemption and on any other failure (see the module
    docstring). ``threads``: the job's CPU threads (all ranks on this node together), shared
    among its ranks; ``None`` leaves torch's threads as they are. ``trainer_overrides`` go to
    ``lightning.Trainer`` over the recipe's settings.
    """

    work, out = Path(work_dir), Path(out_dir)
    paths = (work, out, summary_path)
    work.mkdir(parents=True, exist_ok=True)
    recipe = spec.recipe
    summary = _first_summary(spec, recipe)
    # the same rank the job's Step used: a rank Lightning starts runs this function again
    rank = launched_rank()
    identity = run_identity(
        summary["hashes"], recipe, spec.init, spec.train_weights, _shard_sizes(spec)
    )
    claim_work_dir(work, identity, rank=rank)
    started = time.time()
    last = work / CHECKPOINTS / LAST
    resume = resume_checkpoint(work / CHECKPOINTS, LAST)  # a damaged one is restored first
    summary["resumed_from"] = str(resume) if resume is not None else None
    preemption, rank_failures = PreemptionCheckpoint(last), RankFailures()
    trainer: Any = None
    parts: dict[str, Any] | None = None
    try:
        kwargs, cluster = _launch(spec.name, recipe, trainer_overrides, threads, summary)
        rank = cluster.global_rank
        parts = build_trainer_parts(spec, work, world_size=cluster.world_size, rank=rank)
        if parts["init"] is not None:
            summary["init"] = parts["init"]
            summary["hashes"]["start_weights"] = parts["init"]["weights_sha256"]
        trainer = _trainer(work, parts, [preemption, rank_failures], kwargs)
        if resume is not None:
            log.info("resuming run %s from %s", spec.name, resume)
        trainer.fit(
            parts["module"],
            parts["train_loader"],
            parts["dev_loader"],
            ckpt_path=summary["resumed_from"],
            weights_only=True,
        )
    except SIGTERMException as exc:
        saved = preemption.saved_step is not None
        message = record_preemption(
            summary, trainer=trainer, parts=parts, saved=saved, last=last, work=work, rank=rank,
            started=started,
        )  # fmt: skip
        raise TrainingPreempted(message) from exc
    except BaseException as exc:
        record_failure(
            summary, exc, rank_failures=rank_failures, trainer=trainer, parts=parts,
            paths=paths, rank=rank, started=started,
        )  # fmt: skip
        return summary
    record_completion(summary, trainer=trainer, parts=parts, paths=paths, started=started)
    return summary


def _trainer(work: Path, parts: dict[str, Any], callbacks: list[Any], kwargs: dict) -> Any:
    """The ``lightning.Trainer`` of a run: ``kwargs`` (the recipe's settings and the caller's
    overrides) over the settings every run shares."""

    # a live bar on a terminal; in a log file (SLURM, CI, a redirect) a line every minute
    progress_bar, progress = progress_settings()
    progress_bar = kwargs.pop("enable_progress_bar", progress_bar)  # a caller may say
    return L.Trainer(
        default_root_dir=work,
        max_epochs=-1,
        callbacks=[*parts["callbacks"], *callbacks, *progress],
        logger=parts["loggers"],
        log_every_n_steps=1,
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
        enable_progress_bar=progress_bar,
        **kwargs,
    )
