"""Render the figures tables of the docs (and the README) from JSON: figures are data, the
tables are generated.

A Markdown file marks each generated table with a pair of comments::

    <!-- table: docs/figures/shard_speed.json -->
    ...whatever the renderer wrote last time...
    <!-- end table -->

and, for a table whose figures may not exist yet, the command that measures them::

    <!-- table: docs/figures/real_speech.json | measure: uv run python bench/real_speech.py -->

and, for a table of some of a file's rows, the row key that marks them (``| only: _readme``);
for some of its columns, their keys (``| columns: machine, date, dev``).

Everything between the two comments is replaced by the rendering of the named JSON file (a path
relative to the repository root); where the file does not exist, by one line saying "Not
measured yet" and the command to run. Files named after a benchmark with a table of its own
(``longform.json``, ``real_speech*.json``, ``fine_tuning*.json``, ``weekly_loop.json``) are
rendered by that benchmark's ``markdown`` function; every other file is a *figures table*::

    {
      "title": "optional line above the table",
      "machine": "...", "date": "YYYY-MM-DD", "commit": "...", "load": "...",   # optional: one
      "source": "the command that measured it",                                  # measurement
      "columns": [["key", "header"], ...],
      "rows": [{"key": "cell", ...}, ...],
      "notes": ["optional lines below the table", ...]
    }

Cells are written as they are (strings or numbers; a missing or null cell is ``-``); row keys
that start with ``_`` are marks for ``only``, never shown. Where the
rows come from several measurements, ``machine``, ``date``, ``commit`` and ``load`` are columns
of the rows instead of top-level keys.

    uv run python bench/render_tables.py           # rewrite README.md and docs/*.md in place
    uv run python bench/render_tables.py --check   # exit 1 naming every file that is stale

A benchmark writes its own JSON under ``results/bench/<name>.json``; a figure that belongs in
the docs is copied to ``docs/figures/`` and committed, then rendered by this script.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

MARKER = re.compile(
    r"(?P<open><!-- table: (?P<path>[^ |>]+)(?P<options>(?: \| [a-z]+: [^|]+?)*) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- end table -->)",
    re.DOTALL,
)
OPTIONS = ("measure", "only", "columns")

# benchmarks whose JSON has a layout of its own, rendered by the benchmark's `markdown`
OWN_RENDERER = {
    "longform.json": "longform",
    "real_speech.json": "real_speech",
    "real_speech_demo_recipe.json": "real_speech",
    "real_speech_dev_speaker.json": "real_speech",
    "real_speech_room.json": "real_speech",
    "real_speech_seeds.json": "real_speech",
    "real_speech_voices.json": "real_speech",
    "real_speech_voices_draw1.json": "real_speech",
    "real_speech_voices_draw1_seed1.json": "real_speech",
    "fine_tuning.json": "fine_tuning",
    "fine_tuning_seeds.json": "fine_tuning",
    "weekly_loop.json": "weekly_loop",
    "weekly_loop_seeds.json": "weekly_loop",
    "weekly_loop_george.json": "weekly_loop",
}

Renderer = Callable[[dict[str, Any]], str]


def _bench_markdown(module: str) -> Renderer:
    """The ``markdown`` function of ``bench/<module>.py`` (imported on first use only)."""
    spec = importlib.util.spec_from_file_location(f"bench_{module}", HERE / f"{module}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a dataclass in the module looks its module up there
    sys.path.insert(0, str(HERE))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(HERE))
    return mod.markdown


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def measured_line(data: dict[str, Any]) -> str | None:
    """ "Measured <date> on <machine>, commit <commit>; load <load>." from the top-level keys
    present, or None when the rows carry them."""
    parts = []
    if data.get("date"):
        parts.append(f"Measured {data['date']}")
    if data.get("machine"):
        parts.append(f"on {data['machine']}")
    text = " ".join(parts)
    if data.get("commit"):
        text += f"{',' if text else ''} commit {data['commit']}"
    if data.get("load"):
        text += f"; load {data['load']}"
    if data.get("source"):
        text += f"; measured by `{data['source']}`"
    return (text[0].upper() + text[1:] + ".") if text else None


def parse_options(text: str) -> dict[str, str]:
    """`` | measure: CMD | only: KEY`` -> {"measure": CMD, "only": KEY}."""
    options = {}
    for part in filter(None, (p.strip() for p in text.split(" | "))):
        key, _, value = part.lstrip("| ").partition(": ")
        if key not in OPTIONS:
            raise ValueError(f"unknown table option {key!r} (known: {', '.join(OPTIONS)})")
        options[key] = value.strip()
    return options


def figures_table(
    data: dict[str, Any], only: str | None = None, keep: Sequence[str] | None = None
) -> str:
    """A figures table (the layout in the module docstring) as Markdown; ``only``: just the
    rows where that key is true, without the notes (they speak of every row); ``keep``: just
    these columns, in the file's order."""
    columns = data["columns"]
    keys = {key for key, _ in columns}
    if keep is not None:
        if unknown := set(keep) - keys:
            raise ValueError(f"no such column(s): {sorted(unknown)}")
        columns = [(key, header) for key, header in columns if key in keep]
    for i, row in enumerate(data["rows"]):
        unknown = {k for k in row if not k.startswith("_")} - keys
        if unknown:
            raise ValueError(f"row {i} has cells no column names: {sorted(unknown)}")
    rows = [r for r in data["rows"] if only is None or r.get(only)]
    lines = []
    if data.get("title"):
        lines += [data["title"], ""]
    measured = measured_line(data)
    if measured:
        lines += [measured, ""]
    lines.append("| " + " | ".join(_cell(header) for _, header in columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(key)) for key, _ in columns) + " |")
    for note in [] if only else data.get("notes", []):  # a selection leaves the notes out
        lines += ["", note]
    return "\n".join(lines)


def render(
    path: Path,
    measure: str | None = None,
    only: str | None = None,
    root: Path = REPO,
    keep: Sequence[str] | None = None,
) -> str:
    """The Markdown for one marked table: its JSON rendered, or the "not measured" line."""
    file = root / path
    if not file.exists():
        command = f"`{measure}`" if measure else "its benchmark"
        return (
            f"**Not measured yet**: run {command} and copy its JSON to `{path}`, then "
            "`uv run python bench/render_tables.py`."
        )
    data = json.loads(file.read_text(encoding="utf-8"))
    own = OWN_RENDERER.get(file.name)
    if own and (only or keep):
        raise ValueError(f"{path}: 'only' and 'columns' work on figures tables, not {own}'s")
    text = _bench_markdown(own)(data) if own else figures_table(data, only, keep)
    return text.rstrip("\n")


def render_text(text: str, root: Path = REPO) -> str:
    """``text`` with every marked table rendered afresh."""

    def replace(m: re.Match[str]) -> str:
        options = parse_options(m["options"])
        keep = [k.strip() for k in options["columns"].split(",")] if "columns" in options else None
        body = render(Path(m["path"]), options.get("measure"), options.get("only"), root, keep)
        return f"{m['open']}{body}\n{m['close']}"

    return MARKER.sub(replace, text)


def documents(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def stale(files: Iterable[Path], root: Path = REPO, write: bool = False) -> list[Path]:
    """The files whose tables differ from their JSON (rewritten when ``write``)."""
    out = []
    for file in files:
        text = file.read_text(encoding="utf-8")
        new = render_text(text, root)
        if new != text:
            out.append(file)
            if write:
                file.write_text(new, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", type=Path, help="default: README.md and docs/**/*.md")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = p.parse_args(argv)
    files = [f.resolve() for f in args.files] or documents()
    changed = stale(files, write=not args.check)
    for file in changed:
        verb = "stale" if args.check else "rewrote"
        print(f"{verb}: {file.relative_to(REPO)}")
    if args.check and changed:
        print("run: uv run python bench/render_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
