"""Helpers for the end-to-end tests: run the workflow in a scratch directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from asrflow.io import file_lock

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake_command(*args: str) -> list[str]:
    """Snakemake on the test's work dir: two jobs at once, each with one CPU thread.

    ``--max-threads 1``: pytest-xdist runs one worker more than there are cores, each worker
    may run a DAG, and a job of two OpenMP threads (train, evaluate) beside other busy processes
    spends most of its CPU time spinning while it waits for its other thread. Measured on the
    2-core CI machine kind: three processes of 1,500 small convolution steps (the tiny model's
    kind of work), 2 threads each, took 57 s and 112 s of CPU; with one thread each, 6 s and
    11 s (alone, one process: 3.4 s with 2 threads, 3.7 s with 1)."""
    return [
        *SNAKEMAKE,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--configfile",
        "config.yaml",
        "--cores",
        "2",
        "--max-threads",
        "1",
        *args,
    ]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


def snakemake(
    workdir: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        snakemake_command(*args),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
        env=env or environment(),
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def executed(proc: subprocess.CompletedProcess) -> set[str]:
    """'rule[wildcards]' of every job a (non-dry) run executed."""
    jobs, current = set(), None
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(?:local)?(?:rule|checkpoint) (\w+):", line)
        if m:
            current = m.group(1)
            jobs.add(current)
            continue
        w = re.match(r"^\s+wildcards: (.*)", line)
        if w and current:
            jobs.discard(current)
            jobs.add(f"{current}[{w.group(1)}]")
            current = None
    jobs.discard("all")
    return jobs


def write_config(workdir: Path, config: dict) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def dry_run(workdir: Path, *args: str, env: dict[str, str] | None = None) -> set[str]:
    """'rule[wildcards]' of every job ``snakemake -n`` would run (those after a checkpoint that
    must run first are not known yet: let the checkpoint run, e.g. with ``--until``)."""
    return executed(snakemake(workdir, "-n", *args, env=env))


def rule_counts(jobs: set[str]) -> dict[str, int]:
    """How many jobs of each rule: ``{"evaluate": 8, ...}``."""
    return dict(Counter(job.split("[")[0] for job in jobs))


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """A private copy of what ``build(directory)`` writes, built once per test session (under
    pytest-xdist, once for every worker: the first builds it under a file lock in the run's
    temporary root, the others wait and copy it). Copies are made with symlinks kept and without
    Snakemake's locks, so a test may change its copy freely."""
    own = tmp_path_factory.getbasetemp()
    shared = own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own
    cache, done = shared / name, shared / f"{name}.done"
    with file_lock(shared / f"{name}.lock"):
        if not done.is_file():
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            build(cache)
            done.touch()
    return copy_workdir(cache, tmp_path_factory.mktemp(name))


def copy_workdir(workdir: Path, copy: Path) -> Path:
    """A private copy of a finished work dir, for a test that changes it: symlinks kept, without
    Snakemake's locks (``copy`` may exist, empty)."""
    shutil.copytree(
        workdir, copy, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns("locks")
    )
    return copy
