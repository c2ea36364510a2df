"""One training process of the multi-process tests: ``python -m tests.train.rank_worker JOB.json``.

``JOB.json`` holds ``spec`` (a :class:`RunSpec` as JSON), ``root`` (work, out and summary go
under it) and ``runs``: a list of ``{"overrides": {...}, "fail_at_step": N | null}`` trained one
after the other in this process (a planted failure at step N stops a run like a crash would, and
the next run resumes from its checkpoint); ``sleep_per_step`` (seconds) slows training down. The
rank comes from ``SLURM_PROCID`` (the tests simulate ``srun``).

Every training batch is recorded in ``<root>/batches.rank<R>.jsonl`` (run, epoch, step, cut IDs,
target tokens, ESPnet's summed loss and the loss the module returned), and the step reached is
written to ``<root>/step.rank<R>`` (the preemption test waits for it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

from asrflow.train.module import AsrModule
from asrflow.train.runner import train_run
from tests.train.tiny_run import spec_from_json


def main(job_path: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    root = Path(job["root"])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    records = root / f"batches.rank{rank}.jsonl"
    marker = root / f"step.rank{rank}"
    state = {"run": 0, "fail_at_step": None}
    forward, training_step = AsrModule.forward, AsrModule.training_step

    def recording_forward(self, batch):
        out = forward(self, batch)
        self._recorded_loss_sum = float(out[0].detach()) * len(batch["ids"])
        return out

    def recording_step(self, batch, batch_idx):
        if state["fail_at_step"] is not None and self.global_step == state["fail_at_step"]:
            raise RuntimeError(f"planted failure at step {self.global_step}")
        loss = training_step(self, batch, batch_idx)
        time.sleep(job.get("sleep_per_step", 0.0))
        record = {
            "run": state["run"],
            "epoch": self.current_epoch,
            "step": self.global_step,
            "ids": list(batch["ids"]),
            "tokens": int(batch["num_tokens"]),
            "loss_sum": self._recorded_loss_sum,
            "loss": None if loss is None else float(loss.detach()),
        }
        with open(records, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        marker.write_text(str(self.global_step + 1), encoding="utf-8")
        return loss

    AsrModule.forward = recording_forward
    AsrModule.training_step = recording_step
    spec = spec_from_json(json.dumps(job["spec"]))
    for i, run in enumerate(job["runs"]):
        state.update(run=i, fail_at_step=run.get("fail_at_step"))
        try:
            train_run(
                dataclasses.replace(spec, overrides=run["overrides"]),
                root / "work",
                root / "out",
                root / "summary.json",
            )
        except RuntimeError as exc:
            if "planted failure" not in str(exc):
                raise
            logging.info("rank %d: run %d stopped by the planted failure", rank, i)


if __name__ == "__main__":
    main(sys.argv[1])
