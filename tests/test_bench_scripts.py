"""Every benchmark script still parses its arguments (a bench nobody runs rots: issue 12 found
bench/spike_detector.py broken for weeks). The figures themselves come from running them:
bench/run_all.sh, docs/performance.md."""

from __future__ import annotations

import doctest
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def run_bench(script: str, *args: str, out: Path) -> subprocess.CompletedProcess:
    """``bench/<script>`` run with its figures written under ``out`` (``ASRFLOW_BENCH_OUT``)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        cwd=REPO,
        env={**environment(), "ASRFLOW_BENCH_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def figures_file(out: Path, name: str, columns: list[str], rows: int) -> dict[str, Any]:
    """``out/<name>.json`` after checking its layout: these column keys, this many rows, every
    cell under a column, and what bench/figures.py adds; rendered as a table."""
    data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    assert [key for key, _ in data["columns"]] == columns
    assert len(data["rows"]) == rows, data["rows"]
    for key in ("machine", "date", "commit", "load", "source", "settings"):
        assert data[key], key
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from render_tables import figures_table
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert figures_table(data).count("\n| ") == rows + 1  # the header and a line a row
    return data


def test_padding_sweep_prints_the_padding_of_known_batches(tmp_path: Path) -> None:
    # 1 + 3 s padded to 6 s and 4 + 4 s: 2 of 14 padded seconds are padding (14.3 %)
    from asrflow.data.cuts import save_cuts
    from tests.train.test_audit import make_cuts

    save_cuts(make_cuts(["ab"] * 4, [1.0, 3.0, 4.0, 4.0]), tmp_path / "train.jsonl.gz")
    proc = run_bench(
        "padding_sweep.py",
        "--train", str(tmp_path / "train.jsonl.gz"), "--buckets", "2,3", "--epochs", "1",
        "--set", "batching.max_duration=8", "--set", "batching.shuffle=false",
        out=tmp_path / "figures",
    )  # fmt: skip
    (row,) = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["2"]]
    assert row[:6] == ["2", "2", "2.0", "6.00", "14.3%", "16.7%"], proc.stdout
    columns = ["buckets", "bins", "batches", "audio", "share", "median", "widest"]
    data = figures_file(tmp_path / "figures", "padding_sweep", columns, rows=2)
    assert data["rows"][0]["share"] == "14.3 %"
    assert data["settings"]["buckets"] == "2,3" and data["settings"]["epochs"] == 1


def test_audio_state_scale_writes_a_row_per_check(tmp_path: Path) -> None:
    args = ("--files", "20", "--rounds", "1", "--workdir", str(tmp_path / "work"))
    run_bench("audio_state_scale.py", *args, out=tmp_path)
    data = figures_file(tmp_path, "audio_state_scale", ["check", "seconds"], rows=4)
    assert [r["check"] for r in data["rows"]] == ["first", "unchanged", "touched", "one changed"]
    assert data["settings"]["files"] == 20


def test_validate_scale_writes_a_row_per_stage(tmp_path: Path) -> None:
    # one round without the breakdown: 3 imports, their sum, save, load, validate, the gate
    args = ("--utterances", "1000", "--rounds", "1", "--no-breakdown")
    run_bench("validate_scale.py", *args, "--workdir", str(tmp_path / "work"), out=tmp_path)
    data = figures_file(tmp_path, "validate_scale", ["round", "stage", "seconds", "rate"], rows=8)
    assert data["rows"][-1]["stage"] == "GATE = import + validate"


def load_bench(script: Path) -> Any:
    """A bench script imported as a module (``bench/`` is no package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    # as when a script runs, bench/ is on the path, and stays there: its functions import
    # their neighbours (figures.py) when they are called, not only when the module loads
    if str(script.parent) not in sys.path:
        sys.path.insert(0, str(script.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.mark.parametrize(
    "script", [p for p in SCRIPTS if ">>>" in p.read_text()], ids=lambda p: p.name
)
def test_each_benchmarks_examples_hold(script: Path) -> None:
    result = doctest.testmod(load_bench(script))
    assert result.attempted > 0 and result.failed == 0, result


def test_espnet_speed_gives_each_ratio_with_its_rounds(capsys) -> None:
    # two rounds of two 1-s batches; asrflow's steps take 1.2x and 1.0x the bare loop's: the
    # median (1.1x) misses the 1.05 goal, one round of two meets it
    bench = load_bench(REPO / "bench/espnet_speed.py")

    def rounds(label: str, steps: list[list[float]]) -> list[Any]:
        timed = []
        for seconds in steps:
            t = bench.Timed(label, 16000, lengths=[(16000,)] * 3, padded=[16000] * 3)
            t.starts = [0.0, seconds[0], seconds[0] + seconds[1]]
            t.cpu = [2 * x for x in t.starts]  # two busy threads
            timed.append(t)
        return timed

    def row(label: str, steps: list[list[float]]) -> Any:
        return bench.Row(label, rounds(label, steps), warmup=0, steps=2)

    espnet = row("ESPnet2 trainer (numel)", [[0.1, 0.1], [0.1, 0.1]])
    asrflow = row("asrflow", [[0.12, 0.12], [0.1, 0.1]])
    bare = row("bare loop", [[0.1, 0.1], [0.1, 0.1]])
    bench.print_ratios(espnet, asrflow, bare, bare)
    lines = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()}
    vs_bare = lines["asrflow / bare loop on the same batches"]
    assert "1.100x" in vs_bare, vs_bare
    assert "goal <= 1.05x: NOT met; rounds 1.000-1.200x, 1 of 2 within the goal" in vs_bare
    vs_espnet = lines["asrflow / ESPnet2 trainer, time per audio second"]
    assert "goal <= 1.00x: NOT met; rounds 1.000-1.200x, 1 of 2 within the goal" in vs_espnet
    cpu = lines["asrflow / ESPnet2 trainer, CPU time per audio second"]
    assert "1.100x" in cpu and "1 of 2 within the goal" in cpu, cpu
    assert "1.100x" in lines["asrflow / bare loop, CPU time"]


def test_espnet_speed_rows_have_the_docs_tables_columns() -> None:
    # the rounds of the test above: asrflow 1.2x and 1.0x the bare loop, ESPnet2 equal to it
    bench = load_bench(REPO / "bench/espnet_speed.py")
    assert [key for key, _ in bench.PERFORMANCE_COLUMNS] == docs_columns(
        "performance_training.json"
    )

    def row(label: str, steps: list[list[float]], cpu_per_step: float) -> Any:
        timed = []
        for seconds in steps:
            t = bench.Timed(label, 16000, lengths=[(16000,)] * 3, padded=[16000] * 3)
            t.starts = [0.0, seconds[0], seconds[0] + seconds[1]]
            t.cpu = [5.0, 5.0 + cpu_per_step, 5.0 + 2 * cpu_per_step]
            timed.append(t)
        return bench.Row(label, timed, warmup=0, steps=2)

    # by CPU time asrflow takes 0.8x ESPnet2's (0.2 s a step against 0.25), 1.25x the bare loop's
    espnet = row("ESPnet2 trainer (numel)", [[0.1, 0.1], [0.1, 0.1]], 0.25)
    asrflow = row("asrflow", [[0.12, 0.12], [0.1, 0.1]], 0.2)
    bare = row("bare loop", [[0.1, 0.1], [0.1, 0.1]], 0.16)
    step, overhead = bench.figures_rows(espnet, asrflow, bare, bare, "training, x")
    assert step["what"] == "training, x"
    assert step["asrflow"] == "0.1100 s/step (median), 9 audio s/s; 0.0 % padding"
    assert step["against"] == (
        "ESPnet2's trainer: 0.1000 s/step (median), 10 audio s/s; 0.0 % padding"
    )
    assert step["ratio"].startswith(
        "0.800x the CPU time per audio second (rounds 0.800-0.800x), 1.100x the wall time "
        "(rounds 1.000-1.200x"
    )
    assert step["goal"] == "CPU <= 1x: met (2 of 2 rounds within)"
    assert overhead["asrflow"].startswith("+10.0 ms/step")
    assert overhead["ratio"].startswith(
        "1.100x the bare loop (rounds 1.000-1.200x; ESPnet2: 1.000x"
    )
    assert overhead["ratio"].endswith("CPU time 1.250x (ESPnet2: 1.562x)")
    assert overhead["goal"] == "<= 1.05x: not met (1 of 2 rounds within)"
    assert {key for key, _ in bench.PERFORMANCE_COLUMNS} >= set(step) | set(overhead)


def test_worker_start_row_has_the_docs_tables_columns() -> None:
    bench = load_bench(REPO / "bench/worker_start.py")
    loops = ["preloaded", "in-process (num_workers 0)", "worker, fork server (asrflow)"]
    loops += ["worker, fork"]
    timed = {
        name: [{"seconds": [k * 0.1 + 1.0] * 2, "forward": [0.04, 0.05]}] * 2
        for k, name in enumerate(loops)
    }
    row = bench.figures_row(timed, "2 rounds of 2 steps after 1")
    assert row["what"].startswith("what a loader worker costs a step (`worker_start.py`, 2 rounds")
    assert row["asrflow"] == (
        "in-process (num_workers 0): 1.100x / 0.0450 s; "
        "worker, fork server (asrflow): 1.200x / 0.0450 s"
    )
    assert row["against"] == "preloaded: 1.000x / 0.0450 s; worker, fork: 1.300x / 0.0450 s"
    assert {key for key, _ in bench.PERFORMANCE_COLUMNS} >= set(row)


def test_real_speech_adds_synthetic_voices_to_every_runs_training(tmp_path: Path) -> None:
    from asrflow.corpus.folds import Fold
    from asrflow.settings import with_defaults

    bench = load_bench(REPO / "bench/real_speech.py")

    def fold(name: str) -> Fold:
        splits = {s: tmp_path / "folds" / name / f"{s}.jsonl" for s in ("train", "dev", "test")}
        return Fold(tmp_path / "folds" / name, splits, {})

    folds = {"lucas": fold("lucas"), "nicolas": fold("nicolas")}
    plain = dict(dev="takes", recipe="auto", seeds=None, overrides={}, decoding=None)
    config = bench.project_config(folds, tmp_path, **plain, voices=fold("voices"))
    assert config["corpora"]["voices"]["manifests"] == {"train": "folds/voices/train.jsonl"}
    assert config["runs"]["lucas_devtakes"]["corpora"] == ["fsdd_lucas_devtakes", "voices"]
    assert config["runs"]["nicolas_devtakes"]["corpora"] == ["fsdd_nicolas_devtakes", "voices"]
    with_defaults(config)  # a valid config: a train-only corpus is allowed
    assert bench.voice_settings(bench.arguments(["--voices", "7"])).seed == 0  # --fold-seed's
    drawn = bench.voice_settings(bench.arguments(["--voices", "7", "--voice-seed", "5"]))
    assert (drawn.speakers, drawn.seed) == (7, 5)
    without = bench.project_config(folds, tmp_path, **plain)
    assert "voices" not in without["corpora"]
    assert without["runs"]["lucas_devtakes"]["corpora"] == ["fsdd_lucas_devtakes"]


def test_real_speech_renders_its_table_from_a_json(tmp_path: Path) -> None:
    # two seed replicas of one fold and one plain fold: a row each, the mean over folds
    # averaging the replicas first ((0.2 + 0.4) / 2 and 0.1: 0.2); a failed run reads n/a
    def row(fold: str, seed: Any, dev: float, test: float, minutes: float) -> dict[str, Any]:
        return {
            "fold": fold,
            "seed": seed,
            "selected": "valid.loss.best",
            "dev": {"wer": dev, "ci": [dev - 0.02, dev + 0.03]},
            "test": {"wer": test, "ci": [test - 0.05, test + 0.05]},
            "train": {"wall_seconds": 60 * minutes},
        }

    bench = load_bench(REPO / "bench/real_speech.py")
    rows = [row("nicolas", 0, 0.1, 0.2, 2.5), row("nicolas", 1, 0.2, 0.4, 3.0)]
    rows += [row("george", None, 0.05, 0.1, 4.0)]
    rows.append({"fold": "lucas", "seed": None, "selected": None, "dev": None, "test": None})
    result = {
        "machine": {"cpu": "Test CPU, 2 cores (2 usable)", "cores": 2, "threads": 2},
        "date": "2026-01-02",
        "commit": "abc123",
        "settings": {
            "recipe": "demo_conformer",
            "dev": "takes",
            "seeds": [0, 1],
            "overrides": {"trainer": {"max_steps": 200}},
            "decoding": None,
            "voices": {"speakers": 100, "takes": 3},
        },
        "rows": rows,
        "mean": bench.fold_means(rows),
    }
    assert result["mean"] == {"folds": 2, "dev_wer": 0.1, "test_wer": 0.2}
    (tmp_path / "rs.json").write_text(json.dumps(result))
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench/real_speech.py"), "--table", str(tmp_path / "rs.json")],
        cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Measured 2026-01-02 on Test CPU, 2 cores (2 usable) (2 threads)")
    assert "seeds 0, 1, overrides trainer.max_steps=200" in lines[0]
    assert "plus the digits of 100 synthetic voices (3 takes each) in training" in lines[0]
    nicolas = "| nicolas (seed 1) | 20.00 % [18.00, 23.00] | 40.00 % [35.00, 45.00] |"
    assert f"{nicolas} valid.loss.best | 3.0 |" in lines
    assert (
        "| george | 5.00 % [3.00, 8.00] | 10.00 % [5.00, 15.00] | valid.loss.best | 4.0 |" in lines
    )
    assert "| lucas | n/a | n/a | n/a | n/a |" in lines
    assert lines[-3] == (
        "Mean over 2 fold(s) of the selected artifact (seed replicas of a fold averaged first): "
        "dev 10.00 %, held-out speaker 20.00 %."
    )
    assert lines[-1] == (
        "Held-out speaker WER over seeds, per fold: nicolas 30.00 % (sd 14.14, 20.00 % to "
        "40.00 %, 2 seeds)."
    )


def workflow_config(config: dict) -> dict:
    """``config`` completed and checked as rules/common.smk does (default tokenizers, replicas
    expanded, init runs resolved): what the workflow would run."""
    from asrflow import config_check, project
    from asrflow.lineage import with_init_runs
    from asrflow.replicas import expand_replicas
    from asrflow.settings import with_defaults

    full = with_defaults(config)
    full = with_defaults({**full, **project.with_default_tokenizers(full)})
    full = {**full, **expand_replicas(full)}
    full = {**full, **with_init_runs(full)}
    config_check.check_config(full)
    return full


def fine_tuning_bench():
    """bench/fine_tuning.py as a module; the test skips without fsdd4 (its folds are built)."""
    bench = load_bench(REPO / "bench/fine_tuning.py")
    if not bench.FSDD.is_file():
        pytest.skip(f"{bench.FSDD} is not here (../shared/corpora/fsdd4)")
    return bench


def test_fine_tuning_builds_one_config_with_a_base_and_four_ways_to_learn_the_fold(
    tmp_path: Path,
) -> None:
    bench = fine_tuning_bench()
    args = bench.arguments(["--work", str(tmp_path), "--fold", "lucas"])
    config = bench.project(args, tmp_path)
    assert list(config["runs"]) == ["base", "scratch", "full", "frozen", "lora"]
    assert config["runs"]["lora"]["init"]["adapter"]["rank"] == 8
    assert "init" not in config["runs"]["scratch"]
    assert set(config["corpora"]) == {"demo", "fsdd_lucas_devtakes"}
    assert (tmp_path / "config/recipes/demo_conformer.yaml").is_file()  # the base's recipe
    # the config the workflow would check: every run resolves, the children take base's model
    full = workflow_config(config)
    # the demo's tokenizer cannot spell "zero": every run on the fold has the fold's
    assert {r["tokenizer"] for n, r in full["runs"].items() if n != "base"} == {
        "fsdd_lucas_devtakes_auto"
    }
    row = {
        "run": "lora", "init": bench.WAYS["lora"], "status": "completed", "steps": 2000,
        "peak_lr": 1.667e-4, "trainable_parameters": 12345, "export_bytes": 2_900_000,
        "wall_seconds": 300, "cpu_seconds": 540, "selected": "valid.loss.best",
        "dev": {"wer": 0.05, "ci": [0.03, 0.07]}, "test": {"wer": 0.2, "ci": [0.15, 0.25]},
    }  # fmt: skip
    result = {
        "machine": {"cpu": "Test CPU", "threads": 2}, "date": "2026-01-02", "commit": "abc",
        "settings": {"fold": "lucas", "dev": "takes", "base_override": []}, "rows": [row],
    }  # fmt: skip
    table = bench.markdown(result)
    assert "| lora | freeze" not in table
    swept = {**row, "run": "lora_1of3", "init": bench.WAYS["lora"]}
    assert "| lora_1of3 | adapter: " in bench.markdown({**result, "rows": [swept]})
    assert "; lr 1/3 of base's |" in bench.markdown({**result, "rows": [swept]})
    assert (
        "| 5.00 % [3.00, 7.00] | 20.00 % [15.00, 25.00] | 12,345 | 2.90 | 0.000167 | 5.0, 9.0 |"
        in (table)
    )


def test_fine_tuning_sweeps_full_and_lora_over_shares_of_the_bases_peak_lr(
    tmp_path: Path,
) -> None:
    bench = fine_tuning_bench()
    args = bench.arguments(["--work", str(tmp_path), "--lr-shares", "10,1"])
    config = bench.project(args, tmp_path)
    runs = config["runs"]
    assert list(runs)[5:] == ["full_1of10", "lora_1of10", "full_1of1", "lora_1of1"]
    assert "overrides" not in runs["full"]  # the plan's LR
    assert runs["full_1of10"]["overrides"] == {"optim": {"lr": 0.0005}}  # demo_conformer: 5e-3
    assert runs["lora_1of1"]["overrides"] == {"optim": {"lr": 0.005}}
    assert runs["lora_1of1"]["init"] == bench.WAYS["lora"]
    assert bench.lr_share("full_1of10") == 10 and bench.lr_share("full") is None
    workflow_config(config)  # the workflow accepts the overrides
    # a base trained at another peak: the shares follow it
    args = bench.arguments(["--work", str(tmp_path), "--lr-shares", "4", "--base-override",
                            "optim.lr=0.002"])  # fmt: skip
    swept = bench.project(args, tmp_path)["runs"]["full_1of4"]
    assert swept["overrides"] == {"optim": {"lr": 0.0005}}


def test_fine_tuning_replicates_every_run_on_the_fold_and_sums_up_each_way(
    tmp_path: Path,
) -> None:
    bench = fine_tuning_bench()
    args = bench.arguments(["--work", str(tmp_path), "--lr-shares", "3", "--seeds", "0,1"])
    config = bench.project(args, tmp_path)
    assert "seeds" not in config["runs"]["base"]  # one base: the replicas share their start
    seeds = {n: r.get("seeds") for n, r in config["runs"].items() if n != "base"}
    assert list(seeds) == ["scratch", "full", "frozen", "lora", "full_1of3", "lora_1of3"]
    assert all(s == [0, 1] for s in seeds.values()), seeds
    assert config["report"]["baseline_run"] == "scratch"  # its first replica (settings)
    full = workflow_config(config)
    assert full["runs"]["lora_1of3-seed1"]["init"]["run"] == "base"
    assert bench.fold_runs(args)[:3] == ["scratch-seed0", "scratch-seed1", "full-seed0"]
    args = bench.arguments(["--work", str(tmp_path), "--lr-shares", "3", "--seeds", "1,2",
                            "--ways", "scratch,full_1of3"])  # fmt: skip
    assert list(bench.project(args, tmp_path)["runs"]) == ["base", "scratch", "full_1of3"]
    assert bench.fold_runs(args) == [
        "scratch-seed1", "scratch-seed2", "full_1of3-seed1", "full_1of3-seed2"
    ]  # fmt: skip
    with pytest.raises(bench.AsrflowError, match="--ways full_1of9: not one of scratch, full, "):
        bench.project(bench.arguments(["--ways", "full_1of9", "--work", str(tmp_path)]), tmp_path)
    assert bench.init_of("lora_1of3-seed1") == bench.WAYS["lora"]
    assert bench.init_of("scratch-seed0") is None
    assert bench.lr_share("lora_1of3-seed1") == 3 and bench.way_of("lora_1of3-seed1") == "lora_1of3"
    result = {
        "machine": {"cpu": "Test CPU", "threads": 2}, "date": "2026-01-02", "commit": "abc",
        "settings": {"fold": "nicolas", "dev": "takes", "base_override": []},
        "rows": [
            {"run": f"full-seed{s}", "init": bench.WAYS["full"], "test": {"wer": w, "ci": [0, 1]}}
            for s, w in ((0, 0.2), (1, 0.3))
        ],
    }  # fmt: skip
    assert bench.markdown(result).splitlines()[-1] == (
        "Held-out speaker WER over seeds: full 25.00 % (sd 7.07, 2 seeds)."
    )


def weekly_loop_bench():
    """bench/weekly_loop.py as a module; the test skips without fsdd4 (its weeks are built)."""
    bench = load_bench(REPO / "bench/weekly_loop.py")
    if not bench.FSDD.is_file():
        pytest.skip(f"{bench.FSDD} is not here (../shared/corpora/fsdd4)")
    return bench


def test_weekly_loop_builds_two_weeks_and_fine_tunes_last_weeks_model_on_both(
    tmp_path: Path,
) -> None:
    bench = weekly_loop_bench()
    args = bench.arguments(["--work", str(tmp_path), "--held-out", "george"])
    config = bench.project(args, tmp_path)
    assert list(config["corpora"]) == ["week1", "week2"]
    assert list(config["runs"]) == ["base", "child", "new_only", "scratch"]
    splits = {
        week: json.loads((tmp_path / "folds" / week / "summary.json").read_text())["splits"]
        for week in ("week1", "week2")
    }
    # week 1: two speakers; week 2 adds lucas; both hold george out, the same strings of his
    assert splits["week1"]["train"]["speakers"] == ["jackson", "nicolas"]
    assert splits["week2"]["train"]["speakers"] == splits["week2"]["dev"]["speakers"] == ["lucas"]
    assert splits["week1"]["test"] == splits["week2"]["test"]
    assert splits["week1"]["test"]["speakers"] == ["george"]
    full = workflow_config(config)
    runs = full["runs"]
    assert runs["base"]["corpora"] == ["week1"] and "init" not in runs["base"]
    assert runs["child"]["corpora"] == ["week2", "week1"]  # this week's and a rehearsal
    assert runs["new_only"]["corpora"] == ["week2"]
    # the children keep the base's tokenizer (its vocabulary)
    assert runs["child"]["tokenizer"] == runs["new_only"]["tokenizer"] == "init"
    assert runs["child"]["init"]["run"] == "base" and not runs["child"].get("overrides")
    assert "init" not in runs["scratch"] and runs["scratch"]["corpora"] == ["week1", "week2"]
    # every run evaluated on the held-out speaker and on both weeks' dev takes
    from asrflow.project import eval_sets

    for run in runs:
        assert {"week1.test", "week1.dev", "week2.dev"} <= set(eval_sets(full, run)), run
    with pytest.raises(bench.AsrflowError, match="--new-speaker george is the held-out"):
        bench.project(bench.arguments(["--held-out", "george", "--new-speaker", "george"]),
                      tmp_path)  # fmt: skip


def test_weekly_loop_sweeps_the_child_over_shares_of_the_bases_planned_peak(
    tmp_path: Path,
) -> None:
    bench = weekly_loop_bench()
    args = bench.arguments(["--work", str(tmp_path), "--lr-shares", "10,3", "--seeds", "0,1"])
    config = bench.project(args, tmp_path)
    assert list(config["runs"])[4:] == ["child_1of10", "child_1of3"]
    assert "seeds" not in config["runs"]["base"]  # one base: the replicas share their start
    first = bench.without_lr_shares(config)  # the first pass plans the base
    assert list(first["runs"]) == ["base", "child", "new_only", "scratch"]
    with pytest.raises(bench.AsrflowError, match="base's plan is not written"):
        bench.with_lr_shares(config, tmp_path)
    plan = tmp_path / "results/runs/base/plan/plan.json"
    plan.parent.mkdir(parents=True)
    plan.write_text(json.dumps({"values": {"optim": {"lr": 0.005}}}))
    swept = bench.with_lr_shares(config, tmp_path)["runs"]
    assert swept["child_1of10"]["overrides"] == {"optim": {"lr": 0.0005}}
    assert swept["child_1of3"]["overrides"] == {"optim": {"lr": 0.00167}}
    assert "overrides" not in swept["child"]  # the plan's own share
    full = workflow_config(bench.with_lr_shares(config, tmp_path))
    assert full["runs"]["child_1of3-seed1"]["init"]["run"] == "base"
    assert bench.week_runs(args)[:3] == ["child-seed0", "child-seed1", "new_only-seed0"]
    assert bench.lr_share("child_1of3-seed1") == 3 and bench.lr_share("child") is None
    result = {
        "machine": {"cpu": "Test CPU", "threads": 2}, "date": "2026-01-02", "commit": "abc",
        "settings": {"held_out": "nicolas", "new_speaker": "lucas", "dev": "takes"},
        "rows": [
            {"run": f"child_1of3-seed{s}", "init": "base", "corpora": ["week2", "week1"],
             "peak_lr": 0.00167, "steps": 900, "wall_seconds": 120, "cpu_seconds": 240,
             "eval": {"week1.test": {"wer": w, "ci": [0.1, 0.4]}}}
            for s, w in ((0, 0.2), (1, 0.3))
        ],
    }  # fmt: skip
    table = bench.markdown(result).splitlines()
    assert table[4] == (
        "| child_1of3-seed0 | base's selected model; lr 1/3 of its peak | week2, week1 | "
        "20.00 % [10.00, 40.00] | n/a | n/a | 0.00167 | 900 | 2.0, 4.0 |"
    )
    assert table[-1] == "Held-out speaker WER over seeds: child_1of3 25.00 % (sd 7.07, 2 seeds)."


def docs_columns(name: str) -> list[str]:
    data = json.loads((REPO / "docs/figures" / name).read_text(encoding="utf-8"))
    return [key for key, _ in data["columns"]]


def test_sctk_crosscheck_rows_have_the_docs_tables_columns() -> None:
    from asrflow.evaluate.sctk import Mapsswe

    bench = load_bench(REPO / "bench/sctk_crosscheck.py")
    assert [key for key, _ in bench.COLUMNS] == docs_columns("sctk_crosscheck.json")
    maps = Mapsswe(segments=136, mean=-0.01, std_dev=0.2, z=-0.705, significant=False)
    row = bench.Row(
        "demo.dev", 136, 0.0971, 0.0971, 0.0986, 0.0986, 0, -0.0015, -0.0055, 0.0036, maps
    )
    assert bench.figures_row(row) == {
        "set": "demo.dev, 136 utt.",
        "wer_a": "9.71 %",
        "wer_b": "9.86 %",
        "counts": "no utterance counted differently",
        "bootstrap": "-0.15 points [-0.55, +0.36]",
        "mapsswe": "Z = -0.705 (p 0.48)",
        "verdict": "not significant for either",
    }


def test_spike_detector_rows_have_the_docs_tables_columns() -> None:
    bench = load_bench(REPO / "bench/spike_detector.py")
    assert [key for key, _ in bench.COLUMNS] == docs_columns("spike_detector.json")
    planted = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    ranking = [
        {"id": "a", "spikes": 5, "appearances": 15, "score": 9.05},
        {"id": "x", "spikes": 2, "appearances": 15, "score": 1.14},
        {"id": "b", "spikes": 4, "appearances": 14, "score": 6.4},
    ]
    summary = {"steps": 2400, "loss_spikes": 13, "final_metrics": {"valid/wer": 0.1724}}
    row = bench.figures_row("planted", summary, 47 * 60, ranking, planted)
    assert row == {
        "train": "3 planted, 2400",
        "flagged": "13 of 2400 (0.54 %); planted utterances blamed 9 time(s)",
        "planted": "1 (5/15, 9.05), 3 (4/14, 6.4), 1 never blamed",
        "dev_wer": "17.24 %",
        "minutes": "47",
    }
    clean = bench.figures_row("clean", {**summary, "loss_spikes": 3}, 36 * 60, ranking, planted)
    assert clean["train"] == "clean, 2400" and clean["planted"] is None
    assert clean["flagged"] == "3 of 2400 (0.12 %): 3 utterance(s) blamed"


def test_train_speed_row_has_the_gpu_tables_columns() -> None:
    bench = load_bench(REPO / "bench/train_speed.py")
    rows = [
        ("32-true", 0.183, 0.19, 1300.0, 8.2),
        ("bf16-mixed", 0.234, 0.24, 1000.0, 5.9),
        ("bf16-true", 0.158, 0.16, 1500.0, 4.5),
        ("16-mixed", 0.2, 0.21, 1200.0, 6.0),
    ]
    columns, row = bench.figures_table("config/recipes/a100_conformer.yaml", 250, rows, True)
    keys = [key for key, _ in columns]
    assert keys == [*docs_columns("gpu_train_speed.json"), "16_mixed"]
    assert row == {
        "recipe": "`a100_conformer`, 250 s",
        "tf32": "0.183 s/step, 8.2 GiB",
        "bf16_mixed": "0.234 s/step, 5.9 GiB",
        "bf16_true": "0.158 s/step, 4.5 GiB",
        "16_mixed": "0.200 s/step, 6.0 GiB",
    }
    _, cpu = bench.figures_table(
        "demo_conformer.yaml", 20, [("32-true", 0.1, 0.1, 150, 0.0)], False
    )
    assert cpu["tf32"] == "0.100 s/step"  # no GPU memory on the CPU


def test_eval_dtype_writes_a_row_per_dtype() -> None:
    bench = load_bench(REPO / "bench/eval_dtype.py")
    results = {
        "float32": ({"wer": 0.2, "cer": 0.1}, ["a", "b", "c"], 4.0, {"encoder": "float32"}),
        "bfloat16": ({"wer": 0.25, "cer": 0.1}, ["a", "x", "y"], 2.0, {"encoder": "bfloat16"}),
    }
    rows = bench.figures_rows(results, 200.0)
    assert [r["dtype"] for r in rows] == ["float32", "bfloat16"]
    assert {key for key, _ in bench.COLUMNS} == set(rows[0])
    assert (rows[0]["changed"], rows[1]["changed"], rows[1]["speed"]) == (0, 2, "2.00x")


def test_eval_speed_rows_have_the_docs_tables_columns() -> None:
    from asrflow.text import TextNormalization
    from tests.train.test_audit import make_cuts

    bench = load_bench(REPO / "bench/eval_speed.py")
    assert [key for key, _ in bench.WORKFLOW_COLUMNS] == docs_columns("performance_workflow.json")
    cuts = make_cuts(["one two", "three four"], [4.0, 6.0])

    def system(name: str, dtype: str, seconds: float, hyps: list[str]) -> Any:
        return bench.System(name, dtype, lambda: (hyps, seconds), 1.0, hyps, [seconds])

    systems = [
        system("Speech2Text beam 1", "float32", 0.2, ["one two", "three four"]),
        system("Speech2Text beam 10", "float32", 0.4, ["one two", "three four"]),
        system("asrflow greedy_ctc", "bfloat16", 0.05, ["one two", "three"]),
        system("asrflow lexicon_lm", "float32", 0.4, ["one two", "three four"]),
    ]
    rows = bench.figures_rows(systems, cuts, TextNormalization(), 10.0, "median", "decoding x")
    assert [r["what"] for r in rows] == [
        "decoding x: asrflow greedy_ctc, bfloat16",
        "decoding x: asrflow lexicon_lm, float32",
    ]
    greedy, lexicon = rows
    assert greedy["asrflow"] == "RTF 0.0050, WER 25.00 %"
    assert greedy["against"] == (
        "Speech2Text beam 1, float32: RTF 0.0200, WER 0.00 %; "
        "Speech2Text beam 10, float32: RTF 0.0400, WER 0.00 %"
    )
    assert greedy["ratio"] == "4.0x Speech2Text beam 1's speed, 8.0x Speech2Text beam 10's speed"
    assert greedy["goal"] == ">= 1x Speech2Text beam 1's speed: met"
    assert lexicon["goal"] == "-" and lexicon["ratio"].startswith("0.5x")


def test_the_heavy_benchmarks_write_their_rows_with_the_run_in_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the end of espnet_speed's, spike_detector's and sctk_crosscheck's main, on fixture rows
    import argparse

    from asrflow.evaluate.sctk import Mapsswe
    from asrflow.recipe.load import load_recipe

    monkeypatch.setenv("ASRFLOW_BENCH_OUT", str(tmp_path))
    espnet_speed = load_bench(REPO / "bench/espnet_speed.py")

    def row(label: str, seconds: float) -> Any:
        t = espnet_speed.Timed(label, 16000, lengths=[(16000,)] * 3, padded=[16000] * 3)
        t.starts = [0.0, seconds, 2 * seconds]
        return espnet_speed.Row(label, [t], warmup=0, steps=2)

    args = argparse.Namespace(
        recipe="config/recipes/demo_conformer.yaml", set=["batching.num_buckets=30"],
        device="cpu", threads=2, breakdown=False, rounds=1, steps=2, warmup=0,
    )  # fmt: skip
    recipe = load_recipe(REPO / args.recipe)
    loops = [row("ESPnet2 trainer (numel)", 0.1), row("asrflow", 0.11), row("bare", 0.1)]
    espnet_speed.write_json(args, recipe, {}, 18.96, [*loops, loops[-1]], "0.50 0.40 0.30")
    data = figures_file(tmp_path, "espnet_speed", docs_columns("performance_training.json"), 2)
    assert all(r["load"] == "0.50" and r["commit"] == data["commit"] for r in data["rows"])
    assert "`espnet_speed.py --set batching.num_buckets=30`" in data["rows"][0]["what"]

    spike = load_bench(REPO / "bench/spike_detector.py")
    summary = {"steps": 100, "loss_spikes": 0, "final_metrics": {"valid/wer": 0.5}}
    rows = [spike.figures_row("clean", summary, 60.0, [], [])]
    spike.write_json(rows, "0.1 0.1 0.1", argparse.Namespace(steps=100, plant=3))
    data = figures_file(tmp_path, "spike_detector", docs_columns("spike_detector.json"), 1)
    assert data["rows"][0]["commit"] == data["commit"]

    sctk = load_bench(REPO / "bench/sctk_crosscheck.py")
    maps = Mapsswe(segments=10, mean=0.0, std_dev=0.1, z=2.5, significant=True)
    pair = sctk.Row("a vs b", 10, 0.1, 0.1, 0.2, 0.2, 1, -0.1, -0.15, -0.05, maps)
    sctk.write_json([pair, pair], "0.1 0.1 0.1", {"seeds": 1}, ["a note"])
    data = figures_file(tmp_path, "sctk_crosscheck", docs_columns("sctk_crosscheck.json"), 2)
    assert data["rows"][0]["verdict"] == "significant for both"


def test_recipe_compare_sets_the_shipped_run_against_auto_and_reads_the_replica_table(
    tmp_path: Path,
) -> None:
    bench = load_bench(REPO / "bench/recipe_compare.py")
    config = bench.project_config([0, 1])
    assert list(config["runs"]) == ["demo_ctc", "demo_auto"]
    assert config["runs"]["demo_ctc"]["recipe"] == "demo_conformer"
    assert config["runs"]["demo_ctc"]["seeds"] == config["runs"]["demo_auto"]["seeds"] == [0, 1]
    assert set(config["runs"]["demo_auto"]) == {"corpora", "resources", "seeds"}  # auto's all
    header = (
        "run,eval_set,replicas,seeds,selected,wer_mean,wer_mean_ci_low,wer_mean_ci_high,wer_sd,"
        "wer_min,wer_max,baseline_run,wer_diff_vs_baseline,wer_diff_vs_baseline_ci_low,"
        "wer_diff_vs_baseline_ci_high,missing"
    )
    (tmp_path / "replicas.csv").write_text(
        header + "\n"
        "demo_auto,demo.test,1,1,last x1,0.2,0.17,0.23,,0.2,0.2,demo_ctc,0.05,0.01,0.09,seed0\n"
        'demo_ctc,demo.test,2,"0, 1",last x2,0.15,0.12,0.18,0.01,0.14,0.16,demo_ctc,0.0,0.0,0.0,\n'
    )
    rows = bench.rows_of(tmp_path / "replicas.csv", {"demo_ctc": "demo_conformer"})
    assert [r["run"] for r in rows] == ["demo_ctc", "demo_auto"]  # the baseline first
    assert rows[0]["wer"] == "15.00 % [12.00, 18.00]" and rows[0]["diff"] == "-"
    assert rows[0]["spread"] == "1.00 (14.00 %-16.00 %)"
    assert rows[1]["recipe"] == "?" and rows[1]["spread"] == "n/a (20.00 %-20.00 %)"
    assert rows[1]["diff"] == "+5.00 [1.00, 9.00]"


def test_rerun_speed_times_the_demo_as_the_readme_runs_it(tmp_path: Path, monkeypatch) -> None:
    bench = load_bench(REPO / "bench/rerun_speed.py")
    (tmp_path / "uv.lock").touch()
    monkeypatch.setattr(bench.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert bench.demo_command(tmp_path) == ["uv", "run", "snakemake", "-n"]
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)  # no uv: the project's Python
    assert bench.demo_command(tmp_path) == [sys.executable, "-m", "snakemake", "-n"]
