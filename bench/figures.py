"""A benchmark's figures as data: ``results/bench/<name>.json``, with what they were measured on.

The file has the layout ``bench/render_tables.py`` renders as a table (``columns``, ``rows``,
``notes``) beside ``machine``, ``date``, ``commit``, ``load`` (the load average before and after
the run), ``source`` (the command) and ``settings``, so a figure worth keeping in the docs is
the file copied to ``docs/figures/``::

    cp results/bench/rerun_speed.json docs/figures/
    uv run python bench/render_tables.py

Used by the benchmarks run as scripts from ``bench/`` (``from figures import write_figures``).
``ASRFLOW_BENCH_OUT`` names another folder for the files (the tests write to a temporary one).
Run alone, it prints such a file as the Markdown table the docs would show::

    uv run python bench/figures.py results/bench/rerun_speed.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "bench"
OUT_VARIABLE = "ASRFLOW_BENCH_OUT"
"""An environment variable: where the files go instead of :data:`OUT`."""


def machine() -> str:
    """ "<CPU model>, <n> cores (<m> usable)" from /proc/cpuinfo and the affinity mask."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {os.cpu_count()} cores ({usable} usable)"


def commit() -> str:
    """HEAD's hash, marked when the checkout has uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD") or "unknown"
    return head + (" (uncommitted changes)" if git("status", "--porcelain") else "")


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def figures_json(
    columns: Sequence[tuple[str, str]],
    rows: Sequence[dict[str, Any]],
    *,
    load_before: str,
    notes: Sequence[str] = (),
    settings: dict[str, Any] | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    """The figures of one run with the machine, date, commit and load they were measured at."""
    data: dict[str, Any] = {"title": title} if title else {}
    data |= {
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "load": f"{load_before} before, {load()} after (1, 5, 15 min)",
        "source": shlex.join(["uv", "run", "python", *sys.argv]),
        "settings": settings or {},
        "columns": [list(c) for c in columns],
        "rows": list(rows),
        "notes": list(notes),
    }
    return data


def settings_of(args: Any) -> dict[str, Any]:
    """An ``argparse.Namespace`` as the ``settings`` of :func:`figures_json`: numbers, flags,
    lists and ``None`` as they are, anything else (a path) as its text.

    >>> import argparse
    >>> settings_of(argparse.Namespace(steps=40, quick=True, workdir=Path("/tmp/w"), set=[]))
    {'steps': 40, 'quick': True, 'workdir': '/tmp/w', 'set': []}
    """

    def plain(value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return str(value)

    return {key: plain(value) for key, value in vars(args).items()}


def stamp_rows(data: dict[str, Any], keys: Sequence[str] = ("machine", "date", "commit")) -> None:
    """Copy ``data``'s ``keys`` into each of its rows: for the docs tables whose rows come from
    several measurements and carry these as columns (``docs/figures/performance_training.json``).

    >>> data = {"machine": "M", "date": "D", "commit": "C", "rows": [{"what": "x"}]}
    >>> stamp_rows(data)
    >>> data["rows"]
    [{'what': 'x', 'machine': 'M', 'date': 'D', 'commit': 'C'}]
    """
    for row in data["rows"]:
        row.update({key: data.get(key) for key in keys})


def write_figures(name: str, data: dict[str, Any], out: Path | None = None) -> Path:
    """Write ``data`` to ``out/<name>.json`` (whole or not at all) and return the path; ``out``
    by default ``$ASRFLOW_BENCH_OUT``, or else ``results/bench``."""
    out = out or Path(os.environ.get(OUT_VARIABLE) or OUT)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"figures written to {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Print a results/bench/<name>.json as its table.")
    p.add_argument("file", type=Path)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from render_tables import figures_table

    print(figures_table(json.loads(args.file.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
