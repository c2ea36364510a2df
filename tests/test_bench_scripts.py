"""Every benchmark script still parses its arguments (a bench nobody runs rots: issue 12 found
bench/spike_detector.py broken for weeks). The figures themselves come from running them:
bench/run_all.sh, README "Performance"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import REPO, environment

SCRIPTS = sorted((REPO / "bench").glob("*.py"))


def test_the_benchmarks_are_found() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"rerun_speed.py", "eval_speed.py", "espnet_speed.py", "train_speed.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_each_benchmark_prints_its_usage(script: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]


def test_run_all_names_only_scripts_that_exist() -> None:
    text = (REPO / "bench/run_all.sh").read_text()
    for line in text.splitlines():
        if line.startswith("run "):
            assert (REPO / line.split()[3]).is_file(), line
