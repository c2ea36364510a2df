"""Benchmark: training's loader reading per-file WAVs against Lhotse Shar shards (issue 16).

On a corpus of many short files (``bench/validate_scale.py`` makes them: 0.1-0.3 s of 16 kHz
noise each), it times, for each case, the train loader alone (no model): the bucketing sampler,
the audio loading and the padded batches, as training builds them
(:func:`asrflow.train.batches.loader.batch_loader` for files,
:class:`asrflow.train.batches.shard_stream.ShardLoader` for
shards), over the first ``--max-cuts`` cuts of an epoch, and prints cuts/s, audio seconds per
wall second and the ratio shards / files measured in the same run::

    uv run python bench/shard_speed.py                      # 100k files, ~15 minutes
    uv run python bench/shard_speed.py --quick              # 10k files, a few minutes

The cases: loader workers (``--workers``, default 1 and 2); the page cache cold (every audio file
and shard evicted with ``posix_fadvise(DONTNEED)`` before the pass: no root needed, and
``/proc/sys/vm/drop_caches`` is not writable on every machine) or warm (the same pass again);
and local disk or a simulated slow filesystem: an ``LD_PRELOAD`` shim (compiled here with ``cc``)
that sleeps ``--open-delay-us`` in every ``open``/``openat``/``fopen`` of a file under the
workdir, in every process, the way each open costs a round trip on network storage. The delay
is per open, not per byte, so it models latency, not bandwidth. Shard writing is timed too
(``CutSet.to_shar`` through :func:`asrflow.data.shards.write_shards`).

Each pass runs in a fresh process (``--measure``) so that the shim and the cache state apply to
it alone; every pass of one run uses the same sampler seed, so files and shards read the same
number of cuts, not the same cuts (shards deal cuts in shard order).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_DURATION = 60.0  # seconds of audio per batch: ~300 cuts of these short files

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void delay(const char *path) {
    static const char *prefix = NULL;
    static long us = -1;
    if (us < 0) {
        const char *p = getenv("SLOWOPEN_PREFIX"), *d = getenv("SLOWOPEN_US");
        prefix = p ? p : "";
        us = d ? atol(d) : 0;
    }
    if (us > 0 && path && prefix[0] && strncmp(path, prefix, strlen(prefix)) == 0) usleep(us);
}

#define OPEN_LIKE(name)                                                        \
int name(const char *path, int flags, ...) {                                  \
    static int (*real)(const char *, int, ...) = NULL;                         \
    if (!real) real = dlsym(RTLD_NEXT, #name);                                 \
    mode_t mode = 0;                                                           \
    if (flags & (O_CREAT | O_TMPFILE)) {                                       \
        va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
    }                                                                          \
    delay(path);                                                               \
    return real(path, flags, mode);                                            \
}
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                                      \
int name(int dirfd, const char *path, int flags, ...) {                       \
    static int (*real)(int, const char *, int, ...) = NULL;                    \
    if (!real) real = dlsym(RTLD_NEXT, #name);                                 \
    mode_t mode = 0;                                                           \
    if (flags & (O_CREAT | O_TMPFILE)) {                                       \
        va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
    }                                                                          \
    delay(path);                                                               \
    return real(dirfd, path, flags, mode);                                     \
}
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

#define FOPEN_LIKE(name)                                                       \
FILE *name(const char *path, const char *mode) {                              \
    static FILE *(*real)(const char *, const char *) = NULL;                   \
    if (!real) real = dlsym(RTLD_NEXT, #name);                                 \
    delay(path);                                                               \
    return real(path, mode);                                                   \
}
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)
"""


def build_shim(workdir: Path) -> Path:
    source, lib = workdir / "slowopen.c", workdir / "slowopen.so"
    source.write_text(SHIM, encoding="utf-8")
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(source), "-ldl"], check=True
    )
    return lib


def evict(paths: list[Path]) -> None:
    """Drop ``paths`` from the page cache (clean pages; no root needed)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def prepare(args: argparse.Namespace) -> dict:
    """The corpus, its train cuts, a char tokenizer and the shards (timed)."""
    sys.path.insert(0, str(HERE))
    from validate_scale import generate_audio, write_manifests

    from asrflow.data.cuts import save_cuts
    from asrflow.data.importers import import_nemo
    from asrflow.data.shards import ShardSettings, write_shards
    from asrflow.text import TextNormalization
    from asrflow.tokenizer import TokenizerConfig, train_tokenizer

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    written = generate_audio(work, args.utterances, os.cpu_count() or 1)
    print(f"audio: {written} file(s) written in {time.perf_counter() - t0:.1f} s", flush=True)
    manifests = write_manifests(work, args.utterances)
    cuts_path = work / "train.jsonl.gz"
    if not cuts_path.is_file():
        save_cuts(import_nemo(manifests["train"], threads=os.cpu_count() or 1), cuts_path)
    bpe, tokens = work / "bpe.model", work / "tokens.txt"
    if not bpe.is_file():
        train_tokenizer(
            cuts_path, bpe, tokens, TokenizerConfig(model_type="char"), TextNormalization()
        )
    shards = work / f"shards-{args.audio_format}-{args.shard_size}"
    settings = ShardSettings(shard_size=args.shard_size, audio_format=args.audio_format)
    evict(sorted((work / "audio").rglob("*.wav")))
    t0 = time.perf_counter()
    index = write_shards(cuts_path, shards, settings)
    seconds = time.perf_counter() - t0
    audio_bytes = sum(p.stat().st_size for p in (work / "audio").rglob("*.wav"))
    shard_bytes = sum(p.stat().st_size for p in shards.glob("recording.*.tar"))
    return {
        "cuts": str(cuts_path),
        "bpe": str(bpe),
        "tokens": str(tokens),
        "shards": str(shards),
        "num_cuts": index["num_cuts"],
        "num_shards": len(index["shards"]),
        "write_seconds": seconds,
        "audio_mb": audio_bytes / 2**20,
        "shard_mb": shard_bytes / 2**20,
    }


def measure(args: argparse.Namespace) -> None:
    """One pass in this process: print a JSON line with cuts, audio seconds and wall time."""
    import torch

    from asrflow.data.cuts import load_cuts
    from asrflow.data.shards import shard_fields
    from asrflow.recipe.batching import Batching
    from asrflow.text import TextNormalization
    from asrflow.tokens import TokenEncoder
    from asrflow.train.batches.loader import AsrDataset, batch_loader, make_sampler
    from asrflow.train.batches.shard_stream import ShardBatches, ShardLoader

    torch.set_num_threads(1)
    setup = json.loads(args.measure_setup)
    cuts = load_cuts(setup["cuts"])
    dataset = AsrDataset(TokenEncoder(setup["bpe"], setup["tokens"], TextNormalization()))
    batching = Batching(
        max_duration=MAX_DURATION, num_buckets=10, seed=0, num_workers=args.measure_workers
    )
    sampler = make_sampler(cuts, batching, world_size=1, rank=0)
    if args.measure == "files":
        loader = batch_loader(dataset, sampler, args.measure_workers)
    else:
        batches = ShardBatches(
            [shard_fields(setup["shards"])], dataset, batching, sampler.duration_bins
        )
        loader = ShardLoader(batches, num_workers=args.measure_workers)
    n, audio = 0, 0.0
    t0 = time.perf_counter()
    for batch in loader:
        n += len(batch["ids"])
        audio += float(batch["audio_seconds"])
        if n >= args.max_cuts:
            break
    wall = time.perf_counter() - t0
    print(json.dumps({"cuts": n, "audio": audio, "wall": wall}))


def run_pass(args, setup, mode, workers, shim, delay_us) -> dict:
    env = dict(os.environ)
    if shim is not None and delay_us > 0:
        env.update(
            LD_PRELOAD=str(shim), SLOWOPEN_PREFIX=str(args.workdir), SLOWOPEN_US=str(delay_us)
        )
    command = [
        sys.executable, __file__, "--workdir", str(args.workdir), "--max-cuts", str(args.max_cuts),
        "--measure", mode, "--measure-workers", str(workers), "--measure-setup", json.dumps(setup),
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"pass {mode} workers={workers} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=100_000, help="files in the corpus")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "asrflow-shard-speed"
    )
    parser.add_argument("--max-cuts", type=int, default=20_000, help="cuts read per pass")
    parser.add_argument("--workers", default="1,2", help="loader workers, comma-separated")
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--audio-format", choices=["flac", "wav"], default="flac")
    parser.add_argument(
        "--open-delay-us", type=int, default=2000, help="slow-fs latency per open; 0: skip"
    )
    parser.add_argument("--quick", action="store_true", help="10k files, 4000 cuts a pass")
    parser.add_argument("--measure", choices=["files", "shards"], help=argparse.SUPPRESS)
    parser.add_argument("--measure-workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--measure-setup", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args)
        return
    if args.quick:
        args.utterances, args.max_cuts = 10_000, 4_000
    args.workdir = args.workdir.absolute()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    setup = prepare(args)
    print(
        f"{setup['num_cuts']} train cuts in {setup['num_shards']} shards of {args.shard_size} "
        f"({args.audio_format}): written in {setup['write_seconds']:.1f} s "
        f"({setup['num_cuts'] / setup['write_seconds']:,.0f} cuts/s, audio cache cold); "
        f"{setup['audio_mb']:.0f} MB of WAV files -> {setup['shard_mb']:.0f} MB of shards",
        flush=True,
    )
    shim = build_shim(args.workdir) if args.open_delay_us > 0 else None
    files = sorted((args.workdir / "audio").rglob("*.wav"))
    files += sorted(Path(setup["shards"]).iterdir())
    workers = [int(w) for w in args.workers.split(",")]
    filesystems = [("local", 0)] + ([("slow", args.open_delay_us)] if shim else [])
    rows = []
    for fs, delay in filesystems:
        for w in workers:
            for cache in ("cold", "warm"):
                result = {}
                for mode in ("files", "shards"):
                    if cache == "cold":
                        evict(files)
                    result[mode] = run_pass(args, setup, mode, w, shim, delay)
                rows.append((fs, w, cache, result))
                rates = {m: result[m]["cuts"] / result[m]["wall"] for m in result}
                print(
                    f"  {fs} fs, {w} worker(s), {cache}: files {rates['files']:,.0f} cuts/s, "
                    f"shards {rates['shards']:,.0f} cuts/s",
                    flush=True,
                )
    print(
        f"\nloader only, {args.max_cuts} cuts a pass, batches of {MAX_DURATION:.0f} s, "
        f"{os.cpu_count()} CPU(s); slow fs: {args.open_delay_us} us per open"
    )
    columns = ("files cuts/s", "shards cuts/s", "files audio s/s", "shards audio s/s")
    print(f"{'fs':<6} {'workers':>7} {'cache':<5} " + " ".join(columns) + "  shards/files")
    for fs, w, cache, r in rows:
        f, s = r["files"], r["shards"]
        fr, sr = f["cuts"] / f["wall"], s["cuts"] / s["wall"]
        print(
            f"{fs:<6} {w:>7} {cache:<5} {fr:>12,.0f} {sr:>13,.0f} "
            f"{f['audio'] / f['wall']:>15,.0f} {s['audio'] / s['wall']:>16,.0f} {sr / fr:>12.2f}x"
        )
    write_json(args, setup, rows, load_before)


def write_json(args: argparse.Namespace, setup: dict, rows: list, load_before: str) -> None:
    """results/bench/shard_speed.json: a row per filesystem, worker count and cache state."""
    from figures import figures_json, write_figures  # bench/, beside this script

    columns = [
        ("fs", "filesystem"),
        ("workers", "loader workers"),
        ("cache", "page cache"),
        ("per_file", "per-file cuts/s"),
        ("shards", "shards cuts/s"),
        ("ratio", "shards / per-file"),
    ]
    table = []
    for fs, w, cache, r in rows:
        fr, sr = (r[m]["cuts"] / r[m]["wall"] for m in ("files", "shards"))
        fs_name = "local disk" if fs == "local" else f"{args.open_delay_us / 1000:g} ms per open"
        table.append(
            {"fs": fs_name, "workers": w, "cache": cache, "per_file": f"{fr:,.0f}",
             "shards": f"{sr:,.0f}", "ratio": f"{sr / fr:.2f}x"}
        )  # fmt: skip
    note = (
        f"{setup['num_cuts']} cuts in {setup['num_shards']} shards of {args.shard_size} "
        f"({args.audio_format}), written in {setup['write_seconds']:.1f} s; "
        f"{setup['audio_mb']:.0f} MB of WAV -> {setup['shard_mb']:.0f} MB of shards; "
        f"{args.max_cuts} cuts a pass."
    )
    settings = {k: str(v) for k, v in vars(args).items()}
    data = figures_json(columns, table, load_before=load_before, notes=[note], settings=settings)
    write_figures("shard_speed", data)


if __name__ == "__main__":
    main()
