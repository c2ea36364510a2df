"""One training process of the multi-process tests: ``python -m tests.train.rank_worker JOB.json``.

``JOB.json`` holds ``spec`` (a :class:`RunSpec` as JSON), ``root`` (work, out and summary go
under it) and ``runs``: a list of ``{"overrides": {...}, "fail_at_step": N | null}`` trained one
after the other in this process (a planted failure at step N stops a run like a crash would, and
the next run resumes from its checkpoint); ``sleep_per_step`` (seconds) slows training down. The
tests start it the way ``srun`` would (simulated SLURM).

Every training batch is recorded in ``<root>/batches.rank<R>.jsonl`` (run, epoch, step, cut IDs,
target tokens, ESPnet's summed loss and the loss the module returned), and the step reached is
written to ``<root>/step.rank<R>`` (the preemption test waits for it), ``R`` being the rank the
Trainer gives the process (:func:`record_batches`, also used by the one-task SLURM test, where
Lightning starts the ranks). :func:`record_writes` logs which process writes which file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from asrflow.errors import AsrflowError
from asrflow.train.loop.module import AsrModule
from asrflow.train.run.runner import train_run
from asrflow.types import Pathlike
from tests.train.tiny_run import spec_from_json, with_overrides


def record_batches(
    root: Pathlike, state: dict | None = None, sleep_per_step: float = 0.0
) -> dict[str, Any]:
    """Patch :class:`AsrModule` to record every training batch under ``root`` (see the module
    docstring); ``state`` (``run``, ``fail_at_step``) may be changed between runs. Returns it."""
    root = Path(root)
    state = state if state is not None else {"run": 0, "fail_at_step": None}
    forward, training_step = AsrModule.forward, AsrModule.training_step

    def recording_forward(self, batch):
        out = forward(self, batch)
        self._recorded_loss_sum = float(out[0].detach()) * len(batch["ids"])
        return out

    def recording_step(self, batch, batch_idx):
        if state["fail_at_step"] is not None and self.global_step == state["fail_at_step"]:
            if state.get("fail_rank") in (None, self.global_rank):
                if state.get("fail_with") == "oom":
                    raise torch.OutOfMemoryError(
                        f"CUDA out of memory (planted at step {self.global_step})"
                    )
                raise RuntimeError(f"planted failure at step {self.global_step}")
        loss = training_step(self, batch, batch_idx)
        time.sleep(sleep_per_step)
        record = {
            "run": state["run"],
            "epoch": self.current_epoch,
            "step": self.global_step,
            "ids": list(batch["ids"]),
            "tokens": int(batch["num_tokens"]),
            # a rank out of shards (asrflow.train.batches.shard_stream)
            "filler": bool(batch.get("filler")),
            "loss_sum": self._recorded_loss_sum,
            "loss": None if loss is None else float(loss.detach()),
        }
        with open(root / f"batches.rank{self.global_rank}.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        marker = root / f"step.rank{self.global_rank}"
        marker.write_text(str(self.global_step + 1), encoding="utf-8")
        return loss

    AsrModule.forward = recording_forward
    AsrModule.training_step = recording_step
    return state


def record_writes(root: Pathlike) -> None:
    """Log to ``<root>/writes.jsonl`` every summary, identity file and provenance record this
    process writes (its PID and ``LOCAL_RANK``, the path)."""
    import asrflow.train.run.outcome
    import asrflow.train.run.workdir
    import asrflow.workflow

    def logged(write):
        def wrapper(path, *args, **kwargs):
            entry = {
                "pid": os.getpid(),
                "local_rank": os.environ.get("LOCAL_RANK"),
                "path": str(path),
            }
            with open(Path(root) / "writes.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
            return write(path, *args, **kwargs)

        return wrapper

    for module, name in (
        (asrflow.train.run.outcome, "write_json"),
        (asrflow.train.run.workdir, "write_json"),
        (asrflow.workflow, "write_record"),
    ):
        setattr(module, name, logged(getattr(module, name)))


def main(job_path: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    root = Path(job["root"])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    state = record_batches(root, sleep_per_step=job.get("sleep_per_step", 0.0))
    spec = spec_from_json(json.dumps(job["spec"]))
    for i, run in enumerate(job["runs"]):
        state.update(
            run=i,
            fail_at_step=run.get("fail_at_step"),
            fail_rank=run.get("fail_rank"),
            fail_with=run.get("fail_with"),
        )
        try:
            train_run(
                with_overrides(spec, run["overrides"]),
                root / "work",
                root / "out",
                root / "summary.json",
            )
        except (RuntimeError, AsrflowError) as exc:  # the other rank reports the first's
            if "planted failure" not in str(exc):
                raise
            logging.info("rank %d: run %d stopped by the planted failure", rank, i)


if __name__ == "__main__":
    main(sys.argv[1])
