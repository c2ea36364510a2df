"""A two-device train job inside ONE SLURM task, as the Snakemake SLURM profile runs it.

snakemake-executor-plugin-slurm runs each job as ``srun -n1 python .snakemake/scripts/tmpX.py``,
so a ``devices: 2`` run gets one task (``SLURM_NTASKS=1``) and Lightning's launcher starts the
second rank by running that script again, preamble and ``step(snakemake)`` included. Here the
script is written as Snakemake writes it (its own preamble generator, then ``scripts/train.py``)
and started under simulated SLURM variables of a one-task job on a node with a fake GPU (a
CUDA_VISIBLE_DEVICES but no usable CUDA), so the GPU run falls back to two CPU processes (gloo).

Checked: both ranks train, on disjoint shards (every train utterance once per epoch), with the
loss divided by the global token count; only rank 0 (the process started) writes summaries, the
work directory's identity and the provenance record, and the job's log is rank 0's alone; rank 1
logs to ``train.rank1.log`` beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asrflow.params import Operational
from tests.train.test_ddp import (
    ROOT,
    assert_each_utterance_once_per_epoch,
    assert_loss_per_global_token,
    records,
)
from tests.train.tiny_run import make_tiny_run, recipe_with_overrides

# slow: two fresh Python processes one after the other: ~40 s of imports
pytestmark = pytest.mark.slow

OVERRIDES = {
    "trainer": {
        "max_steps": 6,
        "val_check_interval": 3,
        "devices": 2,
        "num_nodes": 1,
        "accelerator": "gpu",
        "precision": "bf16-mixed",
    },
    # batches of 1-2 cuts: 12 train cuts make about 4 batches per rank and epoch
    "batching": {"max_duration": 2.6},
}
JOB_ID = "4343"


def snakemake_script(workflow: Path, root: Path, spec) -> Path:
    """``scripts/train.py`` as Snakemake's ``script:`` directive writes it for rule ``train``:
    the preamble (made by Snakemake itself) unpickles the job's ``snakemake`` object and points
    ``__file__`` at the real script. The test's additions to the preamble: batch and file-write
    recording, and no usable CUDA (a fake GPU node)."""
    from snakemake.iocontainers import (
        InputFiles,
        Log,
        OutputFiles,
        Params,
        ResourceList,
        Wildcards,
    )
    from snakemake.script import PythonScript
    from snakemake.sourcecache import LocalSourceFile

    real = ROOT / "scripts" / "train.py"
    inputs = {
        "train_0": spec.train_cuts[0],
        "dev": spec.dev_cuts,
        "bpe_model": spec.bpe_model,
        "tokens": spec.tokens,
    }
    outputs = {
        "run": "results/runs/tiny/train/artifacts",
        "summary": "results/runs/tiny/train/summary.json",
        "record": "results/runs/tiny/train/summary.prov.json",
    }
    recipe = recipe_with_overrides(spec.recipe, OVERRIDES)  # what runs.recipe_params gives the rule
    params = {
        "recipe": {
            "settings": recipe.identity(),
            "operational": Operational(recipe.operational()),
            "name": "tiny",
        },
        "weights": None,
        "init": None,
        "normalization": spec.normalization,
        "work": "results/work/tiny",
    }
    addendum = (
        f"__real_file__ = __file__; __file__ = {str(real)!r}; "
        "import torch; torch.cuda.is_available = lambda: False; "
        "from tests.train.rank_worker import record_batches, record_writes; "
        f"record_batches({str(root)!r}); record_writes({str(root)!r});"
    )
    preamble = PythonScript.generate_preamble(
        LocalSourceFile(str(real)),
        None,
        None,
        None,
        InputFiles(fromdict=inputs),
        OutputFiles(fromdict=outputs),
        Params(fromdict=params),
        Wildcards(fromdict={"run": "tiny"}),
        1,
        ResourceList(fromdict={"_cores": 1, "_nodes": 1, "gpu": 2}),
        Log(["logs/train/tiny.log"]),
        {},
        "train",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        False,
        preamble_addendum=addendum,
    )
    script = workflow / ".snakemake" / "scripts" / "tmp1a2b3c4d.train.py"
    script.parent.mkdir(parents=True)
    script.write_text(preamble + real.read_text(encoding="utf-8"), encoding="utf-8")
    return script


def one_task_env() -> dict[str, str]:
    """What the job's ``srun -n1`` step sees on a node with one fake GPU per device."""
    launcher = ("LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PMI_", "MASTER_")) and k not in launcher
    }
    env.update(
        SLURM_JOB_ID=JOB_ID,
        SLURM_JOB_NAME="train",
        SLURM_NTASKS="1",
        SLURM_NTASKS_PER_NODE="1",
        SLURM_NNODES="1",
        SLURM_NODEID="0",
        SLURM_PROCID="0",
        SLURM_LOCALID="0",
        SLURM_NODELIST="127.0.0.1",
        CUDA_VISIBLE_DEVICES="0,1",
        OMP_NUM_THREADS="1",  # Snakemake sets it to the job's threads
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    return env


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    spec = make_tiny_run(tmp_path_factory.mktemp("data"))
    root = tmp_path_factory.mktemp("records")
    workflow = tmp_path_factory.mktemp("workflow")
    script = snakemake_script(workflow, root, spec)
    started = time.time()
    with open(root / "stdout.log", "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [sys.executable, os.path.relpath(script, workflow)],
            cwd=workflow,
            env=one_task_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=300)
        # rank 1 finishes on its own after rank 0's job has ended; wait for its last line
        deadline = time.time() + 60
        rank1_log = workflow / "logs/train/tiny.rank1.log"
        while time.time() < deadline and "rule train: done" not in _read(rank1_log):
            time.sleep(0.2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the job and any rank it started
        except ProcessLookupError:
            pass
    output = (root / "stdout.log").read_text(encoding="utf-8")
    assert proc.returncode == 0, output[-6000:]
    return spec, root, workflow, proc.pid, time.time() - started


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def test_both_ranks_train_on_disjoint_shards(job):
    from asrflow.data.cuts import load_cuts

    spec, root, workflow, _, _ = job
    summary = json.loads((workflow / "results/runs/tiny/train/summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert summary["world_size"] == 2 and summary["devices"] == 2
    cluster = summary["cluster"]
    assert (cluster["environment"], cluster["world_size"], cluster["global_rank"]) == (
        "lightning",
        2,
        0,
    )
    assert cluster["job_id"] == JOB_ID and "Lightning started the 2 ranks" in cluster["note"]
    assert (
        summary["accelerator"] == "cpu"
        and "TRAINING ON THE CPU" in (summary["accelerator_fallback"])
    )
    assert "distributed_backend=gloo" in (root / "stdout.log").read_text(encoding="utf-8")
    per_rank = [records(root, r) for r in (0, 1)]
    assert [r["step"] for r in per_rank[0]] == [r["step"] for r in per_rank[1]] == list(range(6))
    assert_each_utterance_once_per_epoch(per_rank, load_cuts(spec.train_cuts[0]).ids)
    assert assert_loss_per_global_token(per_rank) == 6


def test_only_rank_0_writes_summaries_identity_and_record(job):
    from asrflow.verify import verify

    _, root, workflow, pid, _ = job
    writes = [json.loads(line) for line in (root / "writes.jsonl").read_text().splitlines()]
    assert {w["pid"] for w in writes} == {pid}, writes
    written = sorted(w["path"] for w in writes)
    assert written == sorted(
        [
            "results/work/tiny/identity.json",
            "results/runs/tiny/train/artifacts/espnet_config.json",
            "results/runs/tiny/train/summary.json",
            "results/work/tiny/summary.json",
            "results/runs/tiny/train/summary.prov.json",
        ]
    )
    assert verify([workflow / "results/runs/tiny/train/summary.prov.json"]) == []
    assert not list(workflow.glob("results/work/tiny.stale-*"))


def test_the_job_log_is_rank_0s_and_rank_1_logs_beside_it(job):
    _, _, workflow, _, _ = job
    text = _read(workflow / "logs/train/tiny.log")
    assert "\x00" not in text, "the job log was truncated while rank 0 wrote it"
    assert text.splitlines()[0].endswith(
        "rule train: started (script " + str(ROOT / "scripts/train.py") + ")"
    )
    assert "lightning launch, rank 0 of 2" in text and "rule train: done" in text
    assert "rank 1 of 2" not in text
    rank1 = _read(workflow / "logs/train/tiny.rank1.log")
    assert "lightning launch, rank 1 of 2" in rank1
    assert "rank 1 of a multi-process job" in rank1 and "rule train: done" in rank1
