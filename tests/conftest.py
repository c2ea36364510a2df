"""Shared fixtures: tiny synthetic audio and manifests built on the fly (no downloads)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asrflow.io import file_lock

# One OpenMP thread for torch in every test process and what it starts (before torch is
# imported): the workers run side by side on few cores, where a second thread mostly spins
# (measured: tests/e2e.py, snakemake_command). Tests of thread counts set their own.
os.environ.setdefault("OMP_NUM_THREADS", "1")

LONGEST_FIRST = (
    "tests/test_training_e2e.py",
    "tests/test_bad_input.py",
    "tests/test_weekly_loop_e2e.py",
    "tests/test_revisions_e2e.py",
    "tests/test_slurm_e2e.py",
    "tests/test_replicas_e2e.py",
    "tests/test_workflow_e2e.py",
    "tests/test_real_speech_e2e.py",
    "tests/test_slurm_srun.py",
    "tests/train/test_ddp.py",
    "tests/train/test_one_task_slurm.py",
    "tests/train/test_preemption.py",
)
"""Test modules that take longest (minutes each: whole tiny DAGs, SLURM jobs), started first.
pytest-xdist hands out whole modules (--dist=loadfile), in collection order once
--no-loadscope-reorder stops it sorting them by their number of tests, which put these modules,
having few tests each, last: the suite then ended on one worker still running the longest of
them while the others were idle. Longest first is the classic makespan heuristic. The two SLURM
modules are apart in this list: they take the one test cluster in turn (the_slurm_cluster_alone).
"""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``--numprocesses=auto`` (pyproject's addopts): one worker more than this process may use
    CPU cores. The end-to-end modules spend part of their time waiting, not computing (SLURM
    submission and status polls, Snakemake starting each job), so one worker per core leaves
    cores idle; measured on the 2-core CI machine kind, from clean clones of 4b239f9: see
    docs/development.md and docs/figures/test_suite.json."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run LONGEST_FIRST's modules first, in its order; every other test keeps its place."""
    rank = {module: k for k, module in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        module = item.nodeid.split("::", 1)[0]
        return rank.get(module, len(rank))

    items.sort(key=key)  # stable: the order within each module and among the others is kept


def write_wav(path: Path, seconds: float, sr: int = 16000, seed: int = 0) -> Path:
    """A short noise burst as 16-bit PCM WAV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    samples = (rng.standard_normal(round(seconds * sr)) * 3000).astype(np.int16)
    soundfile.write(path, samples, sr, subtype="PCM_16")
    return path


def write_nemo(path: Path, rows: Sequence[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def utterance_rows(
    split: str, speakers: Sequence[str], per_speaker: int = 3, audio_dir: str = "audio"
) -> list[dict]:
    """Manifest rows (without writing audio) for a split; durations 1.0 s + 0.25 s * i."""
    rows = []
    for spk in speakers:
        for i in range(per_speaker):
            uid = f"{split}-{spk}-{i}"
            rows.append(
                {
                    "audio_filepath": f"{audio_dir}/{uid}.wav",
                    "duration": 1.0 + 0.25 * i,
                    "text": f"hello {spk} number {('zero', 'one', 'two', 'three')[i % 4]}",
                    "speaker": spk,
                    "session": f"{spk}_s{i % 2}",
                    "condition": "noisy" if i % 2 else "clean",
                    "has_entity": i == 0,
                    "code_switch": False,
                    "utt_id": uid,
                }
            )
    return rows


@pytest.fixture
def nemo_corpus(tmp_path: Path) -> Callable[..., dict[str, Path]]:
    """Make a small split NeMo corpus; returns split -> manifest path.

    ``nemo_corpus(mutate=fn)`` lets a test change the rows (dict split -> rows) before writing.
    """

    def make(
        mutate: Callable[[dict[str, list[dict]]], None] | None = None,
        speakers: dict[str, Sequence[str]] | None = None,
    ) -> dict[str, Path]:
        speakers = speakers or {"train": ["a", "b", "c"], "dev": ["d"], "test": ["e"]}
        rows = {split: utterance_rows(split, spks) for split, spks in speakers.items()}
        for split_rows in rows.values():
            for k, r in enumerate(split_rows):
                write_wav(tmp_path / "corpus" / r["audio_filepath"], r["duration"], seed=k)
        if mutate is not None:
            mutate(rows)
        return {
            split: write_nemo(tmp_path / "corpus" / f"{split}.jsonl", r)
            for split, r in rows.items()
        }

    return make


@pytest.fixture(scope="module")
def the_slurm_cluster_alone():
    """Hold the local test cluster for one module at a time (tests/test_slurm_*.py). It is one
    2-CPU node: two modules submitting to it at once (pytest-xdist runs modules in parallel)
    starve each other's jobs; measured: both ran past their 900 s limit. Any worker of any
    pytest process on this machine waits here for the other's module to finish."""
    with file_lock(Path(tempfile.gettempdir()) / "asrflow-tests-slurm.lock"):
        yield


@pytest.fixture(autouse=True)
def _environment_restored():
    """Put ``os.environ`` back as it was after every test. Libraries write to it as a side effect
    (Lightning's ``SLURMEnvironment.main_address`` sets ``MASTER_ADDR``); under pytest-xdist a
    value left by one test reached a later module's ``srun`` jobs in the same worker, whose ranks
    then waited for a rendezvous host that does not exist (measured: tests/train/test_cluster.py
    before tests/test_slurm_srun.py)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
