"""Benchmark: how long the DAG build spends noticing (or not) that audio changed after import.

Each time Snakemake builds the DAG, :func:`asrflow.data.audio_state.refresh_audio_state` checks
every audio file an import read against its provenance record, through the hash cache (stat
only, unless a file's size/mtime/inode moved). The issue's target: 100k unchanged files in
under 2 s on this 2-core machine. Prints, for ``--files`` small files (default 100,000)::

    uv run python bench/audio_state_scale.py --workdir /tmp/asrflow-audio-state

- ``first``: the first check after the import (the hash cache already holds every file, as
  after the import job, which hashed them for its record);
- ``unchanged``: the check every later DAG build makes (median of ``--rounds``);
- ``touched``: every file's mtime moved, content the same (each is re-read and found equal);
- ``one changed``: one file rewritten.

It also writes them as ``results/bench/audio_state_scale.json`` (``bench/figures.py``; no docs
table reads it: the docs' re-check figure comes from ``bench/rerun_speed.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from asrflow.data.audio_state import refresh_audio_state
from asrflow.hashing import HashCache


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def build_corpus(workdir: Path, files: int) -> list[Path]:
    """``files`` distinct 4 kB files under ``<workdir>/audio/`` (those already there are kept)."""
    audio_dir = workdir / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    paths = [audio_dir / f"{i:06d}.wav" for i in range(files)]
    for i, p in enumerate(paths):
        if not p.is_file():
            p.write_bytes(i.to_bytes(4, "little") * 1000)  # 4 kB, distinct
    return paths


def measure(workdir: Path, files: int, rounds: int = 5) -> list[tuple[str, float]]:
    """Build the corpus and record, then time the checks; ``[(check, seconds)]`` in the order
    of the module docstring (``unchanged`` is the median of ``rounds``)."""
    paths = build_corpus(workdir, files)
    cache = HashCache(workdir / "cache.sqlite")
    digests = cache.sha256_many(paths)  # what the import job's record hashed
    record = workdir / "imported.jsonl.gz.prov.json"
    record.write_text(json.dumps({"extra_inputs": {"audio": digests}}))
    state = workdir / "state.json"
    state.unlink(missing_ok=True)

    def check() -> None:
        refresh_audio_state(state, record, HashCache(workdir / "cache.sqlite"))

    rows = [("first", timed(check))]
    rows.append(("unchanged", statistics.median(timed(check) for _ in range(rounds))))
    before = state.read_text()
    now = time.time()
    for p in paths:
        os.utime(p, (now, now))
    rows.append(("touched", timed(check)))
    assert state.read_text() == before, "a touched file must not count as changed"
    paths[0].write_bytes(b"changed")
    rows.append(("one changed", timed(check)))
    assert state.read_text() != before
    paths[0].write_bytes((0).to_bytes(4, "little") * 1000)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/asrflow-audio-state"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from figures import figures_json, load, settings_of, write_figures  # bench/, beside this script

    load_before = load()
    rows = measure(args.workdir, args.files, args.rounds)
    print(f"{args.files} audio files, {os.cpu_count()} CPU(s)")
    print(f"{'check':<12} {'seconds':>8}")
    for name, seconds in rows:
        print(f"{name:<12} {seconds:8.2f}")
    columns = [("check", "check"), ("seconds", "seconds")]
    table = [{"check": name, "seconds": round(seconds, 3)} for name, seconds in rows]
    notes = [f"{args.files} audio files of 4 kB; unchanged: the median of {args.rounds} checks."]
    data = figures_json(
        columns, table, load_before=load_before, notes=notes, settings=settings_of(args)
    )
    write_figures("audio_state_scale", data)


if __name__ == "__main__":
    main()
