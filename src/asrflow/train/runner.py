"""One training run, start to finish: what the ``train`` and ``smoke_train`` rules call.

The working directory (``results/work/<run>/``) is deliberately *not* a declared Snakemake output:
Snakemake deletes a failed job's outputs before rerunning it, and a killed or preempted job must
find its checkpoints again. A rerun resumes from ``<work>/checkpoints/last.ckpt`` (weights,
optimizer, scheduler, global step and the position in the epoch's batch order). When training
finishes, the kept checkpoints, logs and diagnostics are linked into the declared output
directory and the summary is written.

How a run can end (:mod:`asrflow.train.failures`):

- ``status: completed``: checkpoints, logs and diagnostics in the output directory;
- ``status: failed`` with ``failure: diverged`` or ``out_of_memory``: a result of the recipe. The
  summary goes to the declared summary file, to ``<work>/summary.json`` and (a copy) into the
  otherwise empty output directory, and :func:`train_run` *returns*, so the job succeeds and
  the failed run is listed beside the others;
- ``status: preempted`` (SIGTERM): ``last.ckpt`` is saved, ``<work>/summary.json`` written and
  :class:`~asrflow.train.failures.TrainingPreempted` raised, so the job fails and its retry
  resumes;
- ``status: failed`` with ``failure: null`` (any other exception, Ctrl-C): ``<work>/summary.json``
  is written and the exception re-raised, so the job fails and can be retried.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import shutil
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from asrflow.artifacts import CHECKPOINTS, checkpoint_pattern
from asrflow.artifacts import LAST_CHECKPOINT as LAST
from asrflow.data.cuts import load_cuts, text
from asrflow.errors import AsrflowError
from asrflow.export.find import model_sample_rate
from asrflow.hashing import sha256_file
from asrflow.io import write_json
from asrflow.ranks import launched_rank
from asrflow.text import TextNormalization, normalize
from asrflow.train.cluster import ClusterInfo, cpu_fallback, detect_cluster, threads_per_rank
from asrflow.train.recipe import (
    AUDIT_SECTIONS,
    Recipe,
    effective_batch_seconds,
    recipe_sections,
    update_budget,
    warmup_steps,
)
from asrflow.train.spec import RunSpec, spec_recipe, spec_recipe_data
from asrflow.train.trainer import trainer_kwargs
from asrflow.train.workdir import claim_work_dir, run_identity
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


def _hashes(spec: RunSpec, recipe: Recipe) -> dict[str, Any]:
    return {
        "train_cuts": {str(p): sha256_file(p) for p in spec.train_cuts},
        "dev_cuts": sha256_file(spec.dev_cuts),
        "bpe_model": sha256_file(spec.bpe_model),
        "tokens": sha256_file(spec.tokens),
        "recipe": recipe.identity_sha256(),
        "normalization": TextNormalization.from_dict(spec.normalization).sha256(),
        "start_weights": None,
    }


def _train_corpora(spec: RunSpec) -> list[Any]:
    """The run's train CutSets, one per corpus (eager; ``max_train_cuts`` applied)."""
    sets = [load_cuts(p) for p in spec.train_cuts]
    if spec.max_train_cuts is not None:
        sets = [s.subset(first=min(spec.max_train_cuts, len(s))) for s in sets]
    return [s.to_eager() for s in sets]


def _epoch_train_cuts(spec: RunSpec, recipe: Recipe, sets: Sequence[Any], epoch: int) -> Any:
    """Epoch ``epoch``'s train cuts as the run's sampler sees them: the corpora mixed by
    ``weights``, then speed-perturbed."""
    from asrflow.train.data import mix_epoch, speed_perturb

    if len(sets) == 1:
        cuts = sets[0]
    else:
        cuts = mix_epoch(sets, spec.train_weights, epoch, seed=recipe.batching.seed)
    return speed_perturb(cuts, recipe.augmentation.speed_perturb)


def _load_train_cuts(spec: RunSpec, recipe: Recipe) -> Any:
    """The first epoch's train cuts (what the batch audit samples)."""
    return _epoch_train_cuts(spec, recipe, _train_corpora(spec), 0)


def build_trainer_parts(
    spec: RunSpec, recipe: Recipe, work: Path, *, world_size: int = 1, rank: int = 0
) -> dict[str, Any]:
    """Model, module, data loaders, callbacks and loggers for a run (no training yet).

    The train and dev samplers are sharded for ``rank`` of ``world_size`` processes (the
    Trainer's ``use_distributed_sampler`` is off: Lhotse's samplers shard by batch)."""
    import lightning as L
    from lhotse.dataset import SimpleCutSampler
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.data import DataLoader

    from asrflow.tokens import TokenEncoder
    from asrflow.train.data import AsrDataset, EpochMixSampler, make_sampler
    from asrflow.train.diagnostics import Diagnostics
    from asrflow.train.init import apply_init
    from asrflow.train.model import build_model
    from asrflow.train.module import AsrModule
    from asrflow.train.resume import (
        AtomicModelCheckpoint,
        LastCheckpoint,
        ResumableCSVLogger,
        SkippingSampler,
    )

    L.seed_everything(recipe.trainer.seed, workers=True)
    if recipe.trainer.allow_tf32 and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    norm = TextNormalization.from_dict(spec.normalization)
    encoder = TokenEncoder(spec.bpe_model, spec.tokens, norm)
    model, args = build_model(recipe.model, spec.tokens, spec.bpe_model)
    init = apply_init(model, spec.init, tokens=spec.tokens) if spec.init else None

    sets = _train_corpora(spec)
    dev = load_cuts(spec.dev_cuts)
    if spec.max_dev_cuts is not None:
        dev = dev.subset(first=min(spec.max_dev_cuts, len(dev)))
    sample_rate = model_sample_rate(args.frontend_conf)
    dataset = AsrDataset(encoder, sample_rate=sample_rate)
    workers = recipe.batching.num_workers
    if len(sets) > 1 and spec.train_weights is not None:  # a new weighted mix every epoch
        epoch_cuts = functools.partial(_epoch_train_cuts, spec, recipe, sets)
        sampler = EpochMixSampler(epoch_cuts, recipe.batching, world_size=world_size, rank=rank)
        train = sampler.cuts
    else:
        train = _epoch_train_cuts(spec, recipe, sets, 0)
        sampler = make_sampler(train, recipe.batching, world_size=world_size, rank=rank)
    train_sampler = SkippingSampler(sampler)
    train_loader = DataLoader(
        dataset,
        batch_size=None,
        sampler=train_sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    dev_sampler = SimpleCutSampler(
        dev,
        max_duration=recipe.batching.max_duration,
        shuffle=False,
        world_size=world_size,
        rank=rank,
    )
    dev_loader = DataLoader(dataset, batch_size=None, sampler=dev_sampler, num_workers=0)

    references = {c.id: normalize(text(c), norm) for c in dev}
    decode_ids = sorted(references)[: recipe.diagnostics.num_decode_utterances]
    diagnostics = Diagnostics(
        work / "diagnostics",
        decode_ids,
        spike_factor=recipe.diagnostics.spike_factor,
        spike_window=recipe.diagnostics.spike_window,
        spike_z=recipe.diagnostics.spike_z,
        spike_min_excess=recipe.diagnostics.spike_min_excess,
        speed_factors=recipe.augmentation.speed_perturb,
        warmup_steps=warmup_steps(recipe.scheduler, recipe.trainer.max_steps),
        blank_warning=recipe.diagnostics.blank_warning_after_warmup,
        write_spikes=rank == 0,  # rank 0 judges spikes (asrflow.train.diagnostics)
    )
    module = AsrModule(model, recipe, encoder, references, diagnostics, train_sampler)
    ckpt_dir = work / CHECKPOINTS
    callbacks = [
        AtomicModelCheckpoint(
            dirpath=ckpt_dir,
            monitor=c.monitor,
            mode=c.mode,
            save_top_k=c.top_k,
            filename=checkpoint_pattern(c.monitor),
            auto_insert_metric_name=False,
        )
        for c in recipe.criteria
    ]
    callbacks.append(LastCheckpoint(ckpt_dir / LAST))  # after the top-k callbacks: see its doc
    callbacks.append(LearningRateMonitor(logging_interval="step"))
    loggers = [
        ResumableCSVLogger(
            work, name="csv", version="", resuming=(work / CHECKPOINTS / LAST).is_file()
        ),
        TensorBoardLogger(work, name="tensorboard", version=""),
    ]
    return {
        "module": module,
        "args": args,
        "train_loader": train_loader,
        "dev_loader": dev_loader,
        "callbacks": callbacks,
        "loggers": loggers,
        "diagnostics": diagnostics,
        "num_train_cuts": len(train),
        "num_dev_cuts": len(dev),
        "init": init,
    }


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link (or copy) every file of ``src`` into ``dst``."""
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _progress(trainer: Any, parts: Mapping[str, Any] | None) -> dict[str, Any]:
    """Steps and epochs reached, and batches skipped for a non-finite loss."""
    module = (parts or {}).get("module")
    return {
        "steps": trainer.global_step if trainer is not None else None,
        "epochs": trainer.current_epoch if trainer is not None else None,
        "nonfinite_batches": module.nonfinite.total if module is not None else None,
    }


def _write_result_failure(
    summary: Mapping[str, Any], work: Path, out: Path, summary_path: Pathlike
) -> None:
    """A failed run's outputs: the summary, and an output directory holding only its copy."""
    shutil.rmtree(out, ignore_errors=True)  # a rank that failed alone may race rank 0 here
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", summary)
    write_json(work / "summary.json", summary)
    write_json(summary_path, summary)


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
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from asrflow.train.failures import (
        OUT_OF_MEMORY,
        PreemptionCheckpoint,
        RankFailures,
        TrainingPreempted,
        result_failure,
    )
    from asrflow.train.progress import progress_settings
    from asrflow.train.resume import resume_checkpoint

    work, out = Path(work_dir), Path(out_dir)
    work.mkdir(parents=True, exist_ok=True)
    recipe = spec_recipe(spec)
    budget = update_budget(recipe)
    summary: dict[str, Any] = {
        "run": spec.name,
        "status": "running",
        "failure": None,
        "recipe": spec.recipe_name or str(spec.recipe),
        "recipe_settings": recipe.identity(),
        "overrides": dict(spec.overrides),
        "update_budget": budget,
        "effective_batch_seconds": effective_batch_seconds(recipe),
        "hashes": _hashes(spec, recipe),
        "init": dict(spec.init) if spec.init else None,
        "host": platform.node(),
    }
    # the same rank the job's Step used: a rank Lightning starts runs this function again
    rank = launched_rank()
    identity = run_identity(summary["hashes"], recipe, spec.init, spec.train_weights)
    claim_work_dir(work, identity, rank=rank)
    started = time.time()
    last = work / CHECKPOINTS / LAST
    resume = resume_checkpoint(work / CHECKPOINTS, LAST)  # a damaged one is restored first
    resumed_from = str(resume) if resume is not None else None
    preemption = PreemptionCheckpoint(last)
    rank_failures = RankFailures()
    trainer: Any = None
    parts: dict[str, Any] | None = None
    try:
        kwargs, fallback = cpu_fallback({**trainer_kwargs(recipe), **trainer_overrides})
        cluster = detect_cluster(int(kwargs.get("devices", 1)), int(kwargs.get("num_nodes", 1)))
        rank = cluster.global_rank
        summary.update(
            cluster=cluster.to_dict(),
            accelerator=kwargs.get("accelerator"),
            accelerator_fallback=fallback,
        )
        _log_cluster(spec.name, cluster, kwargs)
        if threads is not None:
            _use_threads(spec.name, threads, cluster)
        if cluster.world_size > 1:
            kwargs.setdefault("strategy", "ddp")
        if cluster.environment == "slurm":
            from lightning.pytorch.plugins.environments import SLURMEnvironment

            # Snakemake retries failed jobs: no `scontrol requeue` behind its back on SIGUSR1
            kwargs.setdefault("plugins", [SLURMEnvironment(auto_requeue=False)])
        elif cluster.environment == "lightning":
            from lightning.pytorch.plugins.environments import LightningEnvironment

            # Lightning would pick SLURMEnvironment in any SLURM job and take one task's rank:
            # inside a one-task job its own launcher starts the ranks, which read LOCAL_RANK as
            # detect_cluster (and so the sampler's shard) did
            kwargs.setdefault("plugins", [LightningEnvironment()])
        parts = build_trainer_parts(
            spec, recipe, work, world_size=cluster.world_size, rank=cluster.global_rank
        )
        if parts["init"] is not None:
            summary["init"] = parts["init"]
            summary["hashes"]["start_weights"] = parts["init"]["weights_sha256"]
        # a live bar on a terminal; in a log file (SLURM, CI, a redirect) a line every minute
        progress_bar, progress = progress_settings()
        progress_bar = kwargs.pop("enable_progress_bar", progress_bar)  # a caller may say
        trainer = L.Trainer(
            default_root_dir=work,
            max_epochs=-1,
            callbacks=[*parts["callbacks"], preemption, rank_failures, *progress],
            logger=parts["loggers"],
            log_every_n_steps=1,
            use_distributed_sampler=False,
            num_sanity_val_steps=0,
            enable_progress_bar=progress_bar,
            **kwargs,
        )
        if resumed_from:
            log.info("resuming run %s from %s", spec.name, resumed_from)
        trainer.fit(
            parts["module"],
            parts["train_loader"],
            parts["dev_loader"],
            ckpt_path=resumed_from,
            weights_only=True,
        )
    except SIGTERMException as exc:
        saved = preemption.saved_step is not None
        message = (
            f"run {spec.name} got SIGTERM at step {trainer.global_step if trainer else 0}; "
            + (
                f"saved {last}: rerun the job to resume from it"
                if saved
                else "no checkpoint could be saved (training had not started): a rerun "
                "resumes from the last one"
            )
        )
        summary.update(
            status="preempted",
            error=message,
            saved_checkpoint=str(last) if saved else None,
            wall_seconds=time.time() - started,
            resumed_from=resumed_from,
            **_progress(trainer, parts),
        )
        if rank == 0:
            write_json(work / "summary.json", summary)
        raise TrainingPreempted(message) from exc
    except BaseException as exc:
        failure, error, failed_rank = result_failure(exc), f"{type(exc).__name__}: {exc}", rank
        remote = rank_failures.remote()
        if remote is not None:  # another rank failed first: this exception is its consequence
            failure, error, failed_rank = remote["failure"], remote["error"], remote["rank"]
            error = f"rank {failed_rank}: {error}"
            posted = True
        else:
            posted = rank_failures.post(failure, error)
        summary.update(
            status="failed",
            failure=failure,
            error=error,
            failed_rank=failed_rank,
            traceback=traceback.format_exc(limit=20),
            wall_seconds=time.time() - started,
            resumed_from=resumed_from,
            **_progress(trainer, parts),
        )
        if failure is None:
            if rank == 0:
                write_json(work / "summary.json", summary)
            if remote is not None:
                raise AsrflowError(f"run {spec.name} failed on {error}") from exc
            raise
        log.error(
            "run %s failed (%s): %s; recorded in %s, the job itself succeeds",
            spec.name,
            failure,
            error,
            summary_path,
        )
        # rank 0 records a failure the others posted; one no other rank could be told of (no
        # process group yet) is written by the rank it struck
        if rank == 0 or (failure == OUT_OF_MEMORY and not posted):
            _write_result_failure(summary, work, out, summary_path)
        return summary
    best = {
        cb.monitor: {
            "best_model_path": str(Path(cb.best_model_path).name) if cb.best_model_path else None,
            "best_model_score": float(cb.best_model_score)
            if cb.best_model_score is not None
            else None,
            "top_k": {Path(p).name: float(s) for p, s in sorted(cb.best_k_models.items())},
            "mode": cb.mode,
        }
        for cb in parts["callbacks"]
        if hasattr(cb, "best_k_models")
    }
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    summary.update(
        status="completed",
        wall_seconds=time.time() - started,
        resumed_from=resumed_from,
        num_parameters=sum(p.numel() for p in parts["module"].model.parameters()),
        num_train_cuts=parts["num_train_cuts"],
        num_dev_cuts=parts["num_dev_cuts"],
        precision=str(trainer.precision),
        devices=trainer.num_devices,
        num_nodes=trainer.num_nodes,
        world_size=trainer.world_size,
        criteria=best,
        final_metrics=metrics,
        loss_spikes=parts["diagnostics"].num_spikes,
        spike_suspects=parts["diagnostics"].suspects(),
        warnings=parts["diagnostics"].warnings,
        **_progress(trainer, parts),
    )
    if trainer.global_rank == 0:
        if out.exists():
            shutil.rmtree(out)
        for sub in (CHECKPOINTS, "diagnostics", "csv"):
            if (work / sub).exists():
                _link_tree(work / sub, out / sub)
        write_json(
            out / "espnet_config.json", json.loads(json.dumps(vars(parts["args"]), default=str))
        )
        write_json(summary_path, summary)
        write_json(work / "summary.json", summary)
        log.info("run %s completed: wrote %s and %s", spec.name, out, summary_path)
    return summary


def audit_run(spec: RunSpec, out_json: Pathlike, out_png: Pathlike, out_txt: Pathlike) -> dict:
    """The batch audit of a run: its recipe's sampler over its train cuts, no model, no audio."""
    import tempfile

    from asrflow.data.cuts import save_cuts
    from asrflow.train.audit import audit_batches

    recipe = recipe_sections(spec_recipe_data(spec), AUDIT_SECTIONS)
    with tempfile.TemporaryDirectory(prefix="asrflow-audit-") as tmp:
        cuts_path = spec.train_cuts[0]
        if len(spec.train_cuts) > 1 or recipe.augmentation.speed_perturb:
            cuts_path = Path(tmp) / "train.jsonl.gz"
            save_cuts(_load_train_cuts(spec, recipe), cuts_path)
        return audit_batches(
            cuts_path,
            spec.bpe_model,
            spec.tokens,
            TextNormalization.from_dict(spec.normalization),
            recipe.batching,
            recipe.loss.normalization,
            out_json,
            out_png,
            out_txt,
        )


def smoke_run(spec: RunSpec, work_dir: Pathlike, summary_path: Pathlike) -> dict[str, Any]:
    """Train a few steps on a handful of utterances, validate, export the last checkpoint as a
    package and decode dev audio with ESPnet's ``Speech2Text`` from it: a manifest, tokenizer,
    model or export mismatch fails here in a minute. Starts from scratch every time."""
    from asrflow.export.package import export_package, load_speech2text

    work = Path(work_dir)
    if work.exists():
        shutil.rmtree(work)
    out = work / "out"
    summary = train_run(spec, work / "train", out, work / "summary.json")
    if summary["status"] != "completed":
        raise AsrflowError(
            f"smoke run of {spec.name} failed ({summary['failure']}): {summary['error']}"
        )
    transcripts = sorted((out / "diagnostics" / "transcripts").glob("step*.txt"))
    if not transcripts:
        raise RuntimeError("smoke run: the validation wrote no transcripts")
    summary["transcripts"] = transcripts[-1].read_text(encoding="utf-8")
    espnet_args = json.loads((out / "espnet_config.json").read_text(encoding="utf-8"))
    export_package(
        state_dict_or_checkpoint=out / CHECKPOINTS / LAST,
        espnet_args=espnet_args,
        bpe_model=spec.bpe_model,
        tokens_txt=spec.tokens,
        out_dir=work / "package",
        artifact="smoke",
    )
    speech2text = load_speech2text(work / "package")
    dev = load_cuts(spec.dev_cuts)
    dev = dev.subset(first=min(spec.max_dev_cuts or 2, len(dev)))
    rate = model_sample_rate(espnet_args.get("frontend_conf"))
    summary["export_decode"] = {
        cut.id: speech2text(cut.resample(rate).load_audio()[0])[0][0] for cut in dev
    }
    write_json(summary_path, summary)
    shutil.rmtree(work)
    return summary
