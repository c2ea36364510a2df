"""How a training run ended, written down: the summary of a completed, preempted or failed run,
and the declared outputs that go with it (see :mod:`asrflow.train.run.runner` for the contract).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import traceback
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from asrflow.artifacts import CHECKPOINTS
from asrflow.errors import AsrflowError
from asrflow.io import write_json
from asrflow.train.loop.failures import OUT_OF_MEMORY, result_failure
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

PUBLISHED = (CHECKPOINTS, "diagnostics", "csv")
"""The work directory's subdirectories a completed run links into its output directory."""


def progress(trainer: Any, parts: Mapping[str, Any] | None) -> dict[str, Any]:
    """Steps and epochs reached, and batches skipped for a non-finite loss."""
    module = (parts or {}).get("module")
    return {
        "steps": trainer.global_step if trainer is not None else None,
        "epochs": trainer.current_epoch if trainer is not None else None,
        "nonfinite_batches": module.nonfinite.total if module is not None else None,
    }


def record_preemption(
    summary: MutableMapping[str, Any],
    *,
    trainer: Any,
    parts: Mapping[str, Any] | None,
    saved: bool,
    last: Path,
    work: Path,
    rank: int,
    started: float,
) -> str:
    """Record a run stopped by SIGTERM in ``<work>/summary.json`` (rank 0); the message."""
    message = (
        f"run {summary['run']} got SIGTERM at step {trainer.global_step if trainer else 0}; "
        + (
            f"saved {last}: rerun the job to resume from it"
            if saved
            else "no checkpoint could be saved (training had not started): a rerun resumes from "
            "the last one"
        )
    )
    summary.update(
        status="preempted",
        error=message,
        saved_checkpoint=str(last) if saved else None,
        wall_seconds=time.time() - started,
        **progress(trainer, parts),
    )
    if rank == 0:
        write_json(work / "summary.json", summary)
    return message


def record_failure(
    summary: MutableMapping[str, Any],
    exc: BaseException,
    *,
    rank_failures: Any,
    trainer: Any,
    parts: Mapping[str, Any] | None,
    paths: tuple[Path, Path, Pathlike],
    rank: int,
    started: float,
) -> None:
    """Record a failed run; returns when the failure is a result of the recipe (diverged, out
    of memory: the summary is the job's output), re-raises any other.

    ``paths`` is ``(work, out, summary_path)``. A failure another rank posted first
    (:class:`~asrflow.train.loop.failures.RankFailures`) is the one recorded: this rank's exception
    is its consequence.
    """
    work, out, summary_path = paths
    failure, error, failed_rank = result_failure(exc), f"{type(exc).__name__}: {exc}", rank
    remote = rank_failures.remote()
    if remote is not None:
        failure, failed_rank = remote["failure"], remote["rank"]
        error = f"rank {failed_rank}: {remote['error']}"
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
        **progress(trainer, parts),
    )
    if failure is None:
        if rank == 0:
            write_json(work / "summary.json", summary)
        if remote is not None:
            raise AsrflowError(f"run {summary['run']} failed on {error}") from exc
        raise exc
    log.error(
        "run %s failed (%s): %s; recorded in %s, the job itself succeeds",
        summary["run"],
        failure,
        error,
        summary_path,
    )
    # rank 0 records a failure the others posted; one no other rank could be told of (no
    # process group yet) is written by the rank it struck
    if rank == 0 or (failure == OUT_OF_MEMORY and not posted):
        shutil.rmtree(out, ignore_errors=True)  # a rank that failed alone may race rank 0 here
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "summary.json", summary)
        write_json(work / "summary.json", summary)
        write_json(summary_path, summary)


def best_checkpoints(callbacks: list[Any]) -> dict[str, Any]:
    """Per criterion: the best checkpoint's name and score, and the kept top-k."""
    return {
        cb.monitor: {
            "best_model_path": str(Path(cb.best_model_path).name) if cb.best_model_path else None,
            "best_model_score": float(cb.best_model_score)
            if cb.best_model_score is not None
            else None,
            "top_k": {Path(p).name: float(s) for p, s in sorted(cb.best_k_models.items())},
            "mode": cb.mode,
        }
        for cb in callbacks
        if hasattr(cb, "best_k_models")
    }


def record_completion(
    summary: MutableMapping[str, Any],
    *,
    trainer: Any,
    parts: Mapping[str, Any],
    paths: tuple[Path, Path, Pathlike],
    started: float,
) -> None:
    """Complete the summary of a finished run; rank 0 links the work directory's checkpoints,
    diagnostics and logs into the output directory and writes the summary."""
    work, out, summary_path = paths
    diagnostics = parts["diagnostics"]
    summary.update(
        status="completed",
        wall_seconds=time.time() - started,
        num_parameters=sum(p.numel() for p in parts["module"].model.parameters()),
        trainable_parameters=sum(
            p.numel() for p in parts["module"].model.parameters() if p.requires_grad
        ),
        num_train_cuts=parts["num_train_cuts"],
        num_dev_cuts=parts["num_dev_cuts"],
        precision=str(trainer.precision),
        devices=trainer.num_devices,
        num_nodes=trainer.num_nodes,
        world_size=trainer.world_size,
        criteria=best_checkpoints(parts["callbacks"]),
        final_metrics={
            **parts["metrics_row"].last,  # the last step's row
            **{k: float(v) for k, v in trainer.callback_metrics.items()},
        },
        loss_spikes=diagnostics.num_spikes,
        spike_suspects=diagnostics.suspects(),
        warnings=diagnostics.warnings,
        **progress(trainer, parts),
    )
    if trainer.global_rank != 0:
        return
    if out.exists():
        shutil.rmtree(out)
    for sub in PUBLISHED:
        if (work / sub).exists():
            link_tree(work / sub, out / sub)
    espnet_config = json.loads(json.dumps(vars(parts["args"]), default=str))
    write_json(out / "espnet_config.json", espnet_config)
    write_json(summary_path, summary)
    write_json(work / "summary.json", summary)
    log.info("run %s completed: wrote %s and %s", summary["run"], out, summary_path)


def link_tree(src: Path, dst: Path) -> None:
    """Hard-link (or copy) every file of ``src`` into ``dst``."""
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
