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


def test_padding_sweep_prints_the_padding_of_known_batches(tmp_path: Path) -> None:
    # 1 + 3 s padded to 6 s and 4 + 4 s: 2 of 14 padded seconds are padding (14.3 %)
    from lhotse import CutSet

    from asrflow.data.cuts import make_cut, save_cuts

    cuts = CutSet.from_cuts(
        make_cut(
            utt_id=f"u{i}", audio=f"/nonexistent/u{i}.wav", sampling_rate=16000,
            num_samples=round(d * 16000), duration=d, text="ab",
        )
        for i, d in enumerate([1.0, 3.0, 4.0, 4.0])
    )  # fmt: skip
    save_cuts(cuts, tmp_path / "train.jsonl.gz")
    proc = subprocess.run(
        [
            sys.executable, str(REPO / "bench/padding_sweep.py"),
            "--train", str(tmp_path / "train.jsonl.gz"), "--buckets", "2", "--epochs", "1",
            "--set", "batching.max_duration=8", "--set", "batching.shuffle=false",
        ],
        cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["2"]]
    assert row[:6] == ["2", "2", "2.0", "6.00", "14.3%", "16.7%"], proc.stdout


@pytest.mark.parametrize(
    "script", [p for p in SCRIPTS if ">>>" in p.read_text()], ids=lambda p: p.name
)
def test_each_benchmarks_examples_hold(script: Path) -> None:
    import doctest
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0, result
