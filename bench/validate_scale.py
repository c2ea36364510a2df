"""Benchmark: the data gate (import + validate) on a large synthetic NeMo corpus.

The issue asks that the validation gate handle a 100k-utterance manifest "in well under a
minute". This script builds such a corpus and prints how long each stage takes::

    uv run python bench/validate_scale.py --utterances 100000 --workdir /tmp/asrflow-bench

What it does:

1. writes ``N`` tiny, distinct 16 kHz mono 16-bit WAV files (0.1-0.3 s of seeded noise each;
   a 44-byte RIFF header patched per file, written by a process pool) under
   ``<workdir>/audio/``; files already there (same size) are reused, so reruns skip this;
2. writes a NeMo JSONL manifest per split (train/dev/test, speaker-disjoint, ~80/10/10) under
   ``<workdir>/manifests/``, with relative audio paths, ``speaker`` and ``session`` fields;
3. times, in one process, each stage the workflow runs:

   - ``import_nemo`` per split (parses the manifest, header-reads every file in parallel);
   - ``save_cuts`` + ``load_cuts`` (the ``.jsonl.gz`` hand-off between the rules);
   - ``validate_splits`` (the whole gate: header reads + every check);
   - a breakdown of ``validate_splits``: the header reads, ``_split_stats`` and each function
     of ``asrflow.data.validate.CHECKS`` on its own.

The first round in the process is "cold-ish" (imports done, but Lhotse/Python caches and the
audio headers in the OS page cache only as warm as the generation left them; pass
``--drop-caches`` as root to empty the page cache first); later rounds (``--rounds``) are warm.

The table is also written as ``results/bench/validate_scale.json`` (``bench/figures.py``; no
docs table reads it yet). A few seconds on a tiny corpus::

    uv run python bench/validate_scale.py --utterances 1000 --rounds 1 --no-breakdown
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

SAMPLING_RATE = 16000
MIN_SAMPLES, MAX_SAMPLES = 1600, 4800  # 0.1 .. 0.3 s
FILES_PER_DIR = 1000
UTTS_PER_SPEAKER = 50
SESSIONS_PER_SPEAKER = 2
SPLIT_SHARES = (("train", 0.8), ("dev", 0.1), ("test", 0.1))
WORDS = (
    "the quick brown fox jumps over a lazy dog while seven tired cats watch "
    "from under an old green table near the open kitchen window"
).split()


# --------------------------------------------------------------------------------------------
# corpus generation


def wav_header(num_samples: int, sampling_rate: int = SAMPLING_RATE) -> bytes:
    """A canonical 44-byte PCM RIFF header for mono 16-bit audio."""
    data_bytes = 2 * num_samples
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sampling_rate, 2 * sampling_rate, 2, 16)
        + b"data"
        + struct.pack("<I", data_bytes)
    )


def num_samples_of(index: int) -> int:
    return random.Random(index).randint(MIN_SAMPLES, MAX_SAMPLES)


def audio_relpath(index: int) -> str:
    return f"audio/{index // FILES_PER_DIR:04d}/utt{index:07d}.wav"


def _write_chunk(args: tuple[str, int, int]) -> int:
    """Write files ``start..stop-1`` under ``workdir``; return how many were (re)written."""
    import numpy as np

    workdir, start, stop = args
    root = Path(workdir)
    written = 0
    for i in range(start, stop):
        n = num_samples_of(i)
        path = root / audio_relpath(i)
        if path.is_file() and path.stat().st_size == 44 + 2 * n:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        noise = np.random.default_rng(i).integers(-3000, 3000, size=n, dtype=np.int16)
        with open(path, "wb") as f:
            f.write(wav_header(n) + noise.astype("<i2").tobytes())
        written += 1
    return written


def generate_audio(workdir: Path, n: int, jobs: int) -> int:
    chunks = [(str(workdir), s, min(n, s + FILES_PER_DIR)) for s in range(0, n, FILES_PER_DIR)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return sum(pool.map(_write_chunk, chunks))


def split_of_speaker(speaker: int, num_speakers: int) -> str:
    """Deterministic speaker-disjoint assignment by share of the speaker range."""
    edge = 0.0
    for name, share in SPLIT_SHARES:
        edge += share
        if speaker < round(edge * num_speakers):
            return name
    return SPLIT_SHARES[-1][0]


def write_manifests(workdir: Path, n: int) -> dict[str, Path]:
    out_dir = workdir / "manifests"
    out_dir.mkdir(parents=True, exist_ok=True)
    num_speakers = max(len(SPLIT_SHARES), -(-n // UTTS_PER_SPEAKER))
    rows: dict[str, list[str]] = {name: [] for name, _ in SPLIT_SHARES}
    rng = random.Random(0)
    for i in range(n):
        speaker = i * num_speakers // n  # contiguous blocks of one speaker
        row = {
            "audio_filepath": f"../{audio_relpath(i)}",
            "duration": num_samples_of(i) / SAMPLING_RATE,
            "text": " ".join(rng.choices(WORDS, k=rng.randint(3, 12))),
            "speaker": f"spk{speaker:05d}",
            "session": f"spk{speaker:05d}_s{i % SESSIONS_PER_SPEAKER}",
        }
        rows[split_of_speaker(speaker, num_speakers)].append(json.dumps(row))
    paths = {}
    for name, lines in rows.items():
        path = out_dir / f"{name}.jsonl"
        text = "\n".join(lines) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        paths[name] = path
    return paths


# --------------------------------------------------------------------------------------------
# timing


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float, int]] = []

    def time(self, round_name: str, stage: str, items: int, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = fn()
        self.rows.append((round_name, stage, time.perf_counter() - t0, items))
        return result

    COLUMNS = (("round", "round"), ("stage", "stage"), ("seconds", "seconds"), ("rate", "utt/s"))

    def figures(self) -> list[dict[str, Any]]:
        """The rows of ``results/bench/validate_scale.json`` (:data:`COLUMNS`)."""
        return [
            {
                "round": round_name,
                "stage": stage.strip(),  # the breakdown's indent would not survive Markdown
                "seconds": round(seconds, 3),
                "rate": f"{items / seconds:,.0f}" if seconds > 0 and items else None,
            }
            for round_name, stage, seconds, items in self.rows
        ]

    def print(self) -> None:
        width = max(len(stage) for _, stage, _, _ in self.rows)
        print(f"\n{'round':<6} {'stage':<{width}} {'seconds':>9} {'utt/s':>11}")
        for round_name, stage, seconds, items in self.rows:
            rate = f"{items / seconds:,.0f}" if seconds > 0 and items else "-"
            print(f"{round_name:<6} {stage:<{width}} {seconds:>9.2f} {rate:>11}")


def run_round(
    table: Table,
    round_name: str,
    manifests: dict[str, Path],
    workdir: Path,
    threads: int,
    breakdown: bool,
) -> None:
    from asrflow.data import validate as V
    from asrflow.data.audio import read_audio_infos
    from asrflow.data.cuts import load_cuts, save_cuts
    from asrflow.data.importers import import_nemo
    from asrflow.data.issues import audio_path

    splits: dict[str, list] = {}
    for name, path in manifests.items():
        n = sum(1 for _ in path.open(encoding="utf-8"))
        splits[name] = table.time(
            round_name, f"import_nemo[{name}]", n, lambda p=path: import_nemo(p, threads=threads)
        )
    total = sum(len(c) for c in splits.values())
    table.rows.append(
        (
            round_name,
            "import_nemo (all splits)",
            sum(r[2] for r in table.rows[-len(manifests) :]),
            total,
        )
    )

    cuts_dir = workdir / "cuts"

    def save_all() -> None:
        for name, cuts in splits.items():
            save_cuts(cuts, cuts_dir / f"{name}.jsonl.gz")

    table.time(round_name, "save_cuts (all splits)", total, save_all)
    loaded = table.time(
        round_name,
        "load_cuts (all splits)",
        total,
        lambda: {name: list(load_cuts(cuts_dir / f"{name}.jsonl.gz")) for name in splits},
    )

    config = V.ValidationConfig(threads=threads)
    report = table.time(
        round_name,
        "validate_splits (whole gate)",
        total,
        lambda: V.validate_splits("bench", loaded, config),
    )
    if not report.ok or report.warnings:
        print(report.to_text(limit=10), file=sys.stderr)
        raise SystemExit("the synthetic corpus should validate cleanly")

    if breakdown:
        paths = {audio_path(c) for cuts in loaded.values() for c in cuts}
        infos = table.time(
            round_name,
            "  header reads (read_audio_infos)",
            len(paths),
            lambda: read_audio_infos(paths, threads=threads),
        )
        table.time(
            round_name,
            "  _split_stats",
            total,
            lambda: {name: V._split_stats(cuts, infos) for name, cuts in loaded.items()},
        )
        for check in V.CHECKS:
            table.time(
                round_name,
                f"  {check.__name__}",
                total,
                lambda c=check: list(
                    c(
                        splits=loaded,
                        infos=infos,
                        config=config,
                        normalization=V.DEFAULT_NORMALIZATION,
                    )
                ),
            )
    gate = sum(
        s
        for r, stage, s, _ in table.rows
        if r == round_name and stage in ("import_nemo (all splits)", "validate_splits (whole gate)")
    )
    table.rows.append((round_name, "GATE = import + validate", gate, total))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/asrflow-bench"))
    parser.add_argument(
        "--threads",
        type=int,
        default=4,
        help="header-read threads (the workflow's default rule threads are 4)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="1 cold-ish round + warm reruns")
    parser.add_argument("--no-breakdown", action="store_true", help="skip per-check timings")
    parser.add_argument(
        "--drop-caches",
        action="store_true",
        help="drop the OS page cache before round 1 (needs root; Linux only)",
    )
    parser.add_argument(
        "--profile", type=Path, help="write a cProfile of one extra gate run to this file"
    )
    args = parser.parse_args()

    from figures import figures_json, load, settings_of, write_figures  # bench/, beside this

    load_before = load()
    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    print(
        f"cores: {cores} (usable: {len(os.sched_getaffinity(0))}), python {sys.version.split()[0]}"
    )
    print(f"utterances: {args.utterances:,}, header-read threads: {args.threads}")

    t0 = time.perf_counter()
    written = generate_audio(workdir, args.utterances, jobs=cores)
    manifests = write_manifests(workdir, args.utterances)
    print(
        f"corpus: {written:,} WAV files written, {args.utterances - written:,} reused, "
        f"manifests {', '.join(f'{k}={v.name}' for k, v in manifests.items())} "
        f"in {time.perf_counter() - t0:.1f} s ({workdir})"
    )

    if args.drop_caches:
        try:
            subprocess.run(["sync"], check=True)
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            print("page cache dropped before round 1")
        except OSError as exc:
            print(f"could not drop the page cache ({exc}); round 1 is only cold-ish")

    t0 = time.perf_counter()
    importlib.import_module("asrflow.data.importers")
    importlib.import_module("asrflow.data.validate")

    print(f"import of asrflow.data modules (lhotse etc.): {time.perf_counter() - t0:.2f} s")

    table = Table()
    for r in range(args.rounds):
        run_round(
            table,
            "cold" if r == 0 else f"warm{r}",
            manifests,
            workdir,
            args.threads,
            breakdown=not args.no_breakdown,
        )
    table.print()
    print(
        "\nround 'cold' is the first in this process (page cache dropped only with "
        "--drop-caches); the indented breakdown rows run after validate_splits, so their "
        "header reads are always warm. GATE = import_nemo (all splits) + validate_splits."
    )
    notes = [
        f"{args.utterances:,} utterances, {args.threads} header-read threads. Round 'cold' is the "
        "first in the process; the breakdown rows (after validate_splits) read warm headers. "
        "GATE = import_nemo (all splits) + validate_splits."
    ]
    data = figures_json(
        Table.COLUMNS, table.figures(), load_before=load_before, notes=notes,
        settings=settings_of(args),
    )  # fmt: skip
    write_figures("validate_scale", data)

    if args.profile:
        import cProfile

        from asrflow.data import validate as V
        from asrflow.data.importers import import_nemo

        def gate() -> None:
            splits = {name: import_nemo(p, threads=args.threads) for name, p in manifests.items()}
            V.validate_splits("bench", splits, V.ValidationConfig(threads=args.threads))

        cProfile.runctx("gate()", globals(), {"gate": gate}, str(args.profile))
        print(f"\ncProfile of one gate run written to {args.profile}")


if __name__ == "__main__":
    main()
