"""Benchmark: what a rerun costs when (almost) nothing changed; one table, measured in one run.

Three figures, each printed against its goal (issue 15, section 4)::

    .venv/bin/python bench/rerun_speed.py            # full sizes (1 GB, 100k, 100k)
    .venv/bin/python bench/rerun_speed.py --quick    # a few minutes: 0.2 GB, 20k, 10k

1. **Cold hashing** of ``--gigabytes`` of WAV files (2-20 s of 16 kHz 16-bit noise each) with
   asrflow's hasher, against ``sha256sum`` (GNU coreutils) over the same files. "Cold" means not
   in asrflow's hash cache (a fresh cache database every round). Both sides see the OS page
   cache in the same state: warm by default (every file is read once before the timings, and the
   files fit in memory), or, with ``--drop-caches`` (root; it empties the page cache of the whole
   machine, so not while others take timings), dropped before every single timing. Two pairs:

   - one process: :func:`asrflow.hashing.sha256_file` file after file against
     ``xargs -0 sha256sum`` (one ``sha256sum`` process at a time);
   - in parallel: :meth:`asrflow.hashing.HashCache.sha256_many` with its default 8 threads (what
     the import's provenance record calls, cache look-up and store included) against
     ``xargs -0 -P 8 sha256sum``, the same number of workers.

   Goal: asrflow's throughput >= 0.8x sha256sum's, for each pair (median of ``--rounds``).
2. **Cached re-check** of ``--files`` unchanged audio files, what every DAG build does through
   :func:`asrflow.data.audio_state.refresh_audio_state` (``bench/audio_state_scale.py``'s
   measurement, imported). Goal: under 2 s (the ``unchanged`` row).
3. **No-op dry run** (``snakemake -n``, nothing to do) on a ``--utterances`` corpus built by
   ``bench/validate_scale.py``'s generator, as NeMo manifests of a corpus ``bench`` whose data
   stages (3 imports, the validation gate, 3 filters) this script runs once if they are not
   finished (a few minutes at 100k; the workdir is kept, so later runs skip it). Median of
   ``--dry-runs``. Goal: under 10 s. Also on a finished demo workdir (``--demo-workdir``;
   default this checkout when its ``results/`` holds the report), as the README runs it
   (``uv run snakemake -n``, else that workdir's ``.venv`` Python); goal under 2 s.
   ``--only demo`` times the demo alone.

   Every ``snakemake`` call imports the SLURM executor plugin, which runs ``scontrol show
   config``; where SLURM's client is installed but no controller answers, that waits about 9 s.
   The script times ``scontrol show config`` on its own and prints whether it answered; when it
   did not, it times the dry runs once more with a stub ``scontrol`` (fails at once) first on
   ``PATH``, so the figure without the wait is there too. (The local test controller:
   ``FAKE_GPUS=1 .ci/slurm-cluster.sh start``.)

Everything is built under ``--workdir`` (default ``/tmp/asrflow-rerun-speed``), one folder per
size (``hash-<GB>``, ``recheck-<files>``, ``dag-<utterances>``), reused by later runs;
``--prepare`` only builds them (and runs the data stages), so the timed run can come later, on a
quiet machine. The header names the machine, the commit and the load average before and after,
so a figure taken on a busy machine can be told apart.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import math
import os
import random
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml
from audio_state_scale import build_corpus as build_recheck_corpus
from audio_state_scale import measure as measure_recheck
from validate_scale import SAMPLING_RATE, generate_audio, wav_header, write_manifests

from asrflow.hashing import HashCache, sha256_file

REPO = Path(__file__).resolve().parents[1]
WORKERS = 8
"""Threads of ``HashCache.sha256_many`` by default (the provenance record's call)."""
MIN_SECONDS, MAX_SECONDS = 2.0, 20.0
CORPUS = "bench"
FINISHED_DEMO = Path("results/report/plots/differences.png")
"""The last target of the demo's DAG: a workdir that has it is taken as finished."""

GOAL_HASH_RATIO = 0.8
GOAL_RECHECK_S = 2.0
GOAL_DRY_RUN_S = 10.0
GOAL_DEMO_DRY_RUN_S = 2.0
"""Issue 34's goal for the README's ``uv run snakemake -n`` on the finished demo."""


# --------------------------------------------------------------------------------------------
# helpers


def out(line: str = "") -> None:
    print(line, flush=True)


def sh(cmd: list[str], **kwargs) -> str:
    """stdout of a short command, or '' if it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, **kwargs).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def mem_total_gib() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


class Figures:
    """The final table: one row per figure, with its goal and whether it is met."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []
        self.notes: list[str] = []

    def add(self, name: str, value: str, goal: str = "-", met: bool | None = None) -> None:
        verdict = "-" if met is None else ("met" if met else "NOT met")
        self.rows.append((name, value, goal, verdict))

    def print(self) -> None:
        head = ("figure", "measured", "goal", "")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(3)]
        out()
        out(f"{'figure':<{widths[0]}}  {'measured':<{widths[1]}}  {'goal':<{widths[2]}}  verdict")
        out("-" * (sum(widths) + 14))
        for name, value, goal, verdict in self.rows:
            out(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {goal:<{widths[2]}}  {verdict}")


# --------------------------------------------------------------------------------------------
# 1. cold hashing


def hash_corpus(root: Path, gigabytes: float) -> list[Path]:
    """WAV files of 2-20 s of noise under ``root`` until ``gigabytes`` (10^9 bytes); kept."""
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    target = int(gigabytes * 1e9)
    paths, total, i = [], 0, 0
    while total < target:
        n = int(random.Random(i).uniform(MIN_SECONDS, MAX_SECONDS) * SAMPLING_RATE)
        path = root / f"{i:05d}.wav"
        size = 44 + 2 * n
        if not (path.is_file() and path.stat().st_size == size):
            noise = np.random.default_rng(i).integers(-3000, 3000, size=n, dtype=np.int16)
            path.write_bytes(wav_header(n) + noise.astype("<i2").tobytes())
        paths.append(path)
        total += size
        i += 1
    return paths


def read_all(paths: list[Path]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def sha256sum_digests(paths: list[Path], workers: int) -> dict[str, str]:
    """Digests by ``xargs -0 [-P workers -n k] sha256sum``; one process at a time if 1."""
    cmd = ["xargs", "-0"]
    if workers > 1:
        cmd += ["-P", str(workers), "-n", str(max(1, math.ceil(len(paths) / (4 * workers))))]
    proc = subprocess.run(
        [*cmd, "sha256sum"],
        input=b"\0".join(str(p).encode() for p in paths),
        capture_output=True,
        check=True,
    )
    digests = {}
    for line in proc.stdout.decode().splitlines():
        digest, name = line.split(maxsplit=1)
        digests[name.lstrip("*")] = digest
    return digests


def bench_hashing(args: argparse.Namespace, figures: Figures) -> None:
    root = args.workdir / f"hash-{args.gigabytes:g}GB"
    out(f"\n[1] cold hashing: building/reusing {args.gigabytes:g} GB of WAV files in {root} ...")
    t, paths = timed(lambda: hash_corpus(root, args.gigabytes))
    total = sum(p.stat().st_size for p in paths)
    out(
        f"    {len(paths):,} files, {total / 1e9:.3f} GB "
        f"({total / len(paths) / 1e3:.0f} kB each on average), ready in {t:.1f} s"
    )
    if args.prepare:
        return

    if args.drop_caches:
        try:
            drop_page_cache()
            state = "COLD: page cache dropped (sync; drop_caches=3) before every timing"
        except OSError as e:
            out(f"    cannot drop the page cache ({e}); warming it instead")
            args.drop_caches = False
    if not args.drop_caches:
        read_all(paths)
        state = (
            "WARM: every file read once before the timings "
            f"({total / 1e9:.2f} GB in {mem_total_gib():.0f} GiB of memory); caches not dropped"
        )
    out(f"    page cache: {state}")

    db_dir = Path(tempfile.mkdtemp(prefix="hashcache-", dir=args.workdir))
    strs = [str(p) for p in paths]

    def asrflow_one() -> dict[str, str]:
        return {s: sha256_file(s) for s in strs}

    def asrflow_many() -> dict[str, str]:
        db = db_dir / "cache.sqlite"
        for f in db_dir.iterdir():
            f.unlink()
        with HashCache(db) as cache:  # empty: every file is a miss, as on a first import
            return cache.sha256_many(strs)

    methods: dict[str, Callable[[], dict[str, str]]] = {
        "asrflow sha256_file, 1 thread": asrflow_one,
        "sha256sum, 1 process": lambda: sha256sum_digests(paths, 1),
        f"asrflow HashCache.sha256_many, {WORKERS} threads": asrflow_many,
        f"sha256sum, xargs -P {WORKERS}": lambda: sha256sum_digests(paths, WORKERS),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    reference: dict[str, str] | None = None
    for r in range(args.rounds):
        order = list(methods) if r % 2 == 0 else list(reversed(methods))
        for name in order:
            if args.drop_caches:
                drop_page_cache()
            seconds, digests = timed(methods[name])
            times[name].append(seconds)
            if reference is None:
                reference = digests
            elif digests != reference:
                raise SystemExit(f"{name}: digests differ from the other methods'")
    shutil.rmtree(db_dir, ignore_errors=True)

    out(f"    {'method':<42} {'median s':>9} {'MB/s':>7}   rounds (s)")
    rate = {}
    for name, ts in times.items():
        rate[name] = total / median(ts) / 1e6
        out(f"    {name:<42} {median(ts):9.2f} {rate[name]:7.0f}   {spread(ts)}")
    names = list(methods)
    for label, ours, theirs in (
        ("1 process", names[0], names[1]),
        (f"{WORKERS} workers", names[2], names[3]),
    ):
        ratio = rate[ours] / rate[theirs]
        figures.add(
            f"cold hash {total / 1e9:.2f} GB, {label}: asrflow / sha256sum",
            f"{ratio:.2f}x ({rate[ours]:.0f} vs {rate[theirs]:.0f} MB/s)",
            f">= {GOAL_HASH_RATIO}x",
            ratio >= GOAL_HASH_RATIO,
        )
    figures.notes.append(f"hashing: page cache {state}")


# --------------------------------------------------------------------------------------------
# 2. cached re-check


def bench_recheck(args: argparse.Namespace, figures: Figures) -> None:
    root = args.workdir / f"recheck-{args.files}"
    out(f"\n[2] cached re-check: {args.files:,} files of 4 kB in {root} (audio_state_scale) ...")
    if args.prepare:
        paths = build_recheck_corpus(root, args.files)
        HashCache(root / "cache.sqlite").sha256_many(paths)
        out(f"    {len(paths):,} files and their cache entries ready")
        return
    # its "one changed" check makes refresh_audio_state log the change it found, as it should
    logging.getLogger("asrflow.data.audio_state").setLevel(logging.ERROR)
    rows = dict(measure_recheck(root, args.files, rounds=5))
    for name, seconds in rows.items():
        out(f"    {name:<12} {seconds:8.2f} s")
    figures.add(
        f"cached re-check, {args.files:,} unchanged files (median of 5)",
        f"{rows['unchanged']:.2f} s",
        f"< {GOAL_RECHECK_S:g} s",
        rows["unchanged"] < GOAL_RECHECK_S,
    )
    touched = f"{rows['touched']:.2f} s"
    figures.add(f"  re-check, all {args.files:,} touched (re-read, equal)", touched)


# --------------------------------------------------------------------------------------------
# 3. no-op dry run


def scontrol_state() -> tuple[bool, str]:
    """(answered, description) of ``scontrol show config`` as the SLURM plugin runs it."""
    exe = shutil.which("scontrol")
    if exe is None:
        return True, "not installed (the plugin's query fails at once)"
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=15
        )
        answered, how = proc.returncode == 0, f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        answered, how = False, "no answer within 15 s"
    seconds = time.perf_counter() - start
    conf = os.environ.get("SLURM_CONF") or "unset"
    verdict = "answered" if answered else "did NOT answer"
    return answered, f"{verdict} in {seconds:.3f} s ({how}; {exe}, SLURM_CONF {conf})"


def dag_config() -> dict:
    return {
        "corpora": {
            CORPUS: {
                "source": "nemo",
                "manifests": {s: f"manifests/{s}.jsonl" for s in ("train", "dev", "test")},
                "slice_fields": [],
                # the synthetic utterances are 0.1-0.3 s with up to 12 words: keep them all
                "filter": {
                    "min_duration": 0.0,
                    "min_chars_per_second": 0.0,
                    "max_chars_per_second": 100000.0,
                },
            }
        }
    }


def snakemake(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 3600):
    """(wall s, CPU s of the process tree, completed process)."""
    cpu = children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - start, children_cpu() - cpu, proc


def pending_jobs(proc: subprocess.CompletedProcess) -> int:
    """Jobs a dry run would run (0: nothing to be done)."""
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{text[-3000:]}")
    if "Nothing to be done" in text:
        return 0
    m = re.search(r"^total\s+(\d+)", text, flags=re.MULTILINE)
    return int(m.group(1)) if m else -1


def time_dry_runs(
    label: str, cmd: list[str], cwd: Path, rounds: int, env: dict[str, str] | None = None
) -> tuple[float, int]:
    walls, cpus, jobs = [], [], 0
    for _ in range(rounds):
        wall, cpu, proc = snakemake(cmd, cwd, env=env, timeout=900)
        jobs = max(jobs, pending_jobs(proc))
        walls.append(wall)
        cpus.append(cpu)
    todo = "nothing to do" if jobs == 0 else f"NOT a no-op: {jobs} job(s) pending"
    out(
        f"    {label}: median {median(walls):.2f} s wall, {median(cpus):.2f} s CPU "
        f"(rounds: {spread(walls)} s); {todo}"
    )
    return median(walls), jobs


@contextlib.contextmanager
def stub_scontrol_env() -> Iterator[dict[str, str]]:
    """While inside, an environment with a stub ``scontrol`` (fails at once) first on ``PATH``."""
    with tempfile.TemporaryDirectory(prefix="stub-scontrol-") as tmp:
        stub = Path(tmp) / "scontrol"
        stub.write_text("#!/bin/sh\nexit 1\n")
        stub.chmod(0o755)
        yield {**os.environ, "PATH": f"{tmp}{os.pathsep}{os.environ.get('PATH', '')}"}


def bench_dry_run(args: argparse.Namespace, figures: Figures, scontrol_ok: bool) -> None:
    root = args.workdir / f"dag-{args.utterances}"
    out(f"\n[3] no-op dry run: {args.utterances:,}-utterance corpus in {root} ...")
    t, written = timed(lambda: generate_audio(root, args.utterances, jobs=os.cpu_count() or 1))
    write_manifests(root, args.utterances)
    out(f"    corpus: {written:,} WAV files written, the rest reused ({t:.1f} s)")
    config = root / "config.yaml"
    text = yaml.safe_dump(dag_config(), sort_keys=False)
    if not config.is_file() or config.read_text() != text:
        config.write_text(text)
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(REPO / "Snakefile"),
        "--configfile", "config.yaml",
    ]  # fmt: skip

    wall, _, proc = snakemake([*cmd, "-n"], root, timeout=900)
    jobs = pending_jobs(proc)
    if jobs:
        out(f"    data stages not finished ({jobs} job(s) pending): running them once ...")
        wall, cpu, proc = snakemake(cmd, root)
        if proc.returncode != 0:
            raise SystemExit(f"the data stages failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        out(f"    data stages (import x3, validate, filter x3): {wall:.1f} s ({cpu:.1f} s CPU)")
    else:
        out(f"    data stages already finished (first dry run: {wall:.2f} s)")
    if args.prepare:
        return

    median_s, jobs = time_dry_runs("snakemake -n", [*cmd, "-n"], root, args.dry_runs)
    figures.add(
        f"snakemake -n, {args.utterances:,} utterances, nothing to do",
        f"{median_s:.2f} s" + ("" if jobs == 0 else f" ({jobs} jobs pending!)"),
        f"< {GOAL_DRY_RUN_S:g} s",
        median_s < GOAL_DRY_RUN_S and jobs == 0,
    )
    if not scontrol_ok:
        with stub_scontrol_env() as env:
            median_s, _ = time_dry_runs(
                "snakemake -n, stub scontrol (no SLURM wait)",
                [*cmd, "-n"],
                root,
                args.dry_runs,
                env=env,
            )
        figures.add("  the same, stub scontrol (no SLURM wait)", f"{median_s:.2f} s")
    bench_demo(args, figures, scontrol_ok)


def demo_command(demo: Path) -> list[str]:
    """The README's ``uv run snakemake -n`` where the demo is a uv project and uv is installed;
    else its ``.venv``'s (or this) Python's ``-m snakemake -n``."""
    if (demo / "uv.lock").is_file() and shutil.which("uv"):
        return ["uv", "run", "snakemake", "-n"]
    python = demo / ".venv" / "bin" / "python"
    python = python if python.is_file() else Path(sys.executable)
    return [str(python), "-m", "snakemake", "-n"]


def bench_demo(args: argparse.Namespace, figures: Figures, scontrol_ok: bool) -> None:
    demo = args.demo_workdir
    if demo is None:
        if not (REPO / FINISHED_DEMO).is_file():
            out(f"\n    demo: skipped ({REPO} has no {FINISHED_DEMO}; pass --demo-workdir)")
            return
        demo = REPO
    commit = sh(["git", "-C", str(demo), "rev-parse", "--short", "HEAD"]).strip() or "no git"
    cmd = demo_command(demo)
    out(f"\n    demo workdir {demo} (commit {commit}, {shlex.join(cmd)}):")
    median_s, jobs = time_dry_runs("snakemake -n", cmd, demo, args.dry_runs)
    figures.add(
        f"{'uv run ' if cmd[0] == 'uv' else ''}snakemake -n, finished demo ({commit})",
        f"{median_s:.2f} s" + ("" if jobs == 0 else f" ({jobs} jobs pending!)"),
        f"< {GOAL_DEMO_DRY_RUN_S:g} s",
        median_s < GOAL_DEMO_DRY_RUN_S and jobs == 0,
    )
    if not scontrol_ok:
        with stub_scontrol_env() as env:
            median_s, _ = time_dry_runs(
                "snakemake -n, stub scontrol", cmd, demo, args.dry_runs, env
            )
        figures.add("  the same, stub scontrol (no SLURM wait)", f"{median_s:.2f} s")


# --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, help="audio to hash (default 1; quick 0.2)")
    parser.add_argument("--files", type=int, help="files to re-check (default 100000; quick 20000)")
    parser.add_argument(
        "--utterances", type=int, help="corpus of the dry run (default 100000; quick 10000)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/asrflow-rerun-speed"))
    parser.add_argument("--demo-workdir", type=Path, help="a finished demo workdir")
    parser.add_argument("--rounds", type=int, help="hashing rounds (default 3; quick 2)")
    parser.add_argument("--dry-runs", type=int, help="dry runs per figure (default 3; quick 2)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes")
    parser.add_argument(
        "--drop-caches",
        action="store_true",
        help="drop the whole machine's page cache before each hashing timing (root)",
    )
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only build the corpora and run the data stages (no timings), e.g. ahead of time",
    )
    parser.add_argument(
        "--only",
        choices=["hash", "recheck", "dry-run", "demo"],
        action="append",
        help="run only these (dry-run includes the demo; demo: the finished demo's dry run alone)",
    )
    args = parser.parse_args()
    quick = args.quick
    for name, full, small in (
        ("gigabytes", 1.0, 0.2),
        ("files", 100_000, 20_000),
        ("utterances", 100_000, 10_000),
        ("rounds", 3, 2),
        ("dry_runs", 3, 2),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.demo_workdir is not None:
        args.demo_workdir = args.demo_workdir.resolve()
    only = set(args.only or ["hash", "recheck", "dry-run"])

    dirty = " (+ uncommitted changes)" if sh(["git", "status", "--porcelain"], cwd=REPO) else ""
    commit = sh(["git", "rev-parse", "HEAD"], cwd=REPO).strip() or "unknown"
    snakemake_version = sh([sys.executable, "-m", "snakemake", "--version"]).strip()
    scontrol_ok, scontrol_text = scontrol_state()
    out("asrflow rerun speed" + (" -- QUICK (smaller sizes)" if quick else ""))
    out(f"date:      {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    out(f"commit:    {commit}{dirty}")
    out(
        f"machine:   {cpu_model()}, {os.cpu_count()} cores "
        f"({len(os.sched_getaffinity(0))} usable), {mem_total_gib():.0f} GiB"
    )
    coreutils = (sh(["sha256sum", "--version"]).splitlines() or ["no sha256sum"])[0]
    out(f"software:  python {sys.version.split()[0]}, snakemake {snakemake_version}, {coreutils}")
    load_before = load_average()
    out(f"load avg:  {load_before} (1/5/15 min, at start)")
    out(
        f"sizes:     hash {args.gigabytes:g} GB, re-check {args.files:,} files, "
        f"dry run {args.utterances:,} utterances; {args.rounds} hashing rounds, "
        f"{args.dry_runs} dry runs per figure"
    )
    out(f"scontrol show config: {scontrol_text}")

    figures = Figures()
    if "hash" in only:
        bench_hashing(args, figures)
    if "recheck" in only:
        bench_recheck(args, figures)
    if "dry-run" in only:
        bench_dry_run(args, figures, scontrol_ok)
    elif "demo" in only:
        bench_demo(args, figures, scontrol_ok)

    if args.prepare:
        out("\nprepared; no timings taken (run again without --prepare)")
        return
    figures.print()
    out()
    for note in figures.notes:
        out(note)
    out(f"scontrol show config (the SLURM plugin's query in every snakemake call): {scontrol_text}")
    out(f"load avg at the end: {load_average()}")
    from figures import figures_json, write_figures  # bench/, beside this script

    columns = [("figure", "figure"), ("measured", "measured"), ("goal", "goal"), ("met", "verdict")]
    rows = [dict(zip(("figure", "measured", "goal", "met"), r, strict=True)) for r in figures.rows]
    notes = [*figures.notes, f"scontrol show config: {scontrol_text}"]
    settings = {k: str(v) for k, v in vars(args).items()}
    data = figures_json(columns, rows, load_before=load_before, notes=notes, settings=settings)
    write_figures("rerun_speed", data)


if __name__ == "__main__":
    main()
