"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link or anchor
fails), the figures tables are what ``bench/render_tables.py`` makes of ``docs/figures/``, the
config reference is what ``bench/config_reference.py`` makes of the schema, the README's links
resolve and its two commands are the ones CI runs, and no commit hash sits in the docs' prose."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_tables = bench_module("render_tables")
config_reference = bench_module("config_reference")
figures = bench_module("figures")

FIXTURE = {
    "title": "Speed of a thing.",
    "machine": "Test CPU, 2 cores",
    "date": "2026-12-05",
    "commit": "abc1234",
    "load": "0.5",
    "columns": [["what", "what"], ["speed", "speed"], ["ratio", "ratio | x"]],
    "rows": [
        {"what": "one", "speed": 1.5, "ratio": "1.0x", "_readme": True},
        {"what": "two | pipes", "speed": None},
    ],
    "notes": ["A note."],
}


def write_fixture(root: Path) -> Path:
    (root / "docs" / "figures").mkdir(parents=True)
    path = root / "docs" / "figures" / "speed.json"
    path.write_text(json.dumps(FIXTURE), encoding="utf-8")
    return path


def test_a_figures_table_renders_its_measurement_line_rows_and_notes() -> None:
    assert render_tables.figures_table(FIXTURE).splitlines() == [
        "Speed of a thing.",
        "",
        "Measured 2026-12-05 on Test CPU, 2 cores, commit abc1234; load 0.5.",
        "",
        "| what | speed | ratio \\| x |",
        "|---|---|---|",
        "| one | 1.5 | 1.0x |",
        "| two \\| pipes | - | - |",
        "",
        "A note.",
    ]


def test_only_keeps_the_marked_rows() -> None:
    table = render_tables.figures_table(FIXTURE, only="_readme")
    assert "| one |" in table and "two" not in table and "A note." not in table


def test_columns_keeps_the_named_columns_in_the_files_order() -> None:
    table = render_tables.figures_table(FIXTURE, keep=["ratio", "what"]).splitlines()
    assert table[4:7] == ["| what | ratio \\| x |", "|---|---|", "| one | 1.0x |"]
    with pytest.raises(ValueError, match="no such column"):
        render_tables.figures_table(FIXTURE, keep=["nope"])


def test_a_cell_no_column_names_is_an_error() -> None:
    with pytest.raises(ValueError, match="row 0 has cells no column names: \\['speed2'\\]"):
        render_tables.figures_table({**FIXTURE, "rows": [{"what": "x", "speed2": 1}]})


def test_marked_tables_are_replaced_and_a_missing_json_says_how_to_measure(
    tmp_path: Path,
) -> None:
    write_fixture(tmp_path)
    text = (
        "# Page\n\n<!-- table: docs/figures/speed.json | only: _readme | columns: what, speed -->"
        "\nstale\n"
        "<!-- end table -->\n\nmiddle\n\n"
        "<!-- table: docs/figures/none.json | measure: uv run python bench/x.py -->\n"
        "RESULTS\n<!-- end table -->\n"
    )
    out = render_tables.render_text(text, tmp_path)
    assert "stale" not in out and "RESULTS" not in out
    assert "| one | 1.5 |\n" in out and "two" not in out and "1.0x" not in out
    assert (
        "**Not measured yet**: run `uv run python bench/x.py` and copy its JSON to "
        "`docs/figures/none.json`" in out
    )
    assert out.count("<!-- end table -->") == 2 and "\nmiddle\n" in out
    assert render_tables.render_text(out, tmp_path) == out  # rendering again changes nothing


def test_stale_names_the_files_whose_tables_differ_and_rewrites_them(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    page = tmp_path / "docs" / "page.md"
    page.write_text("<!-- table: docs/figures/speed.json -->\n<!-- end table -->\n")
    assert render_tables.stale([page], tmp_path) == [page]
    assert render_tables.stale([page], tmp_path, write=True) == [page]
    assert render_tables.stale([page], tmp_path) == []
    assert "| two \\| pipes | - | - |" in page.read_text()


def test_an_unknown_table_option_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown table option 'where'"):
        render_tables.parse_options(" | where: x")


def test_a_benchmarks_json_carries_its_conditions_and_renders_as_a_table(tmp_path: Path) -> None:
    data = figures.figures_json(
        [("what", "what"), ("speed", "speed")],
        [{"what": "hashing", "speed": "1,208 MB/s"}],
        load_before="0.10 0.20 0.30",
        notes=["one run"],
        settings={"rounds": "3"},
    )
    path = figures.write_figures("speed", data, tmp_path)
    assert path == tmp_path / "speed.json"
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["date"] and written["machine"] and written["commit"]
    assert written["load"].startswith("0.10 0.20 0.30 before, ")
    table = render_tables.figures_table(written)
    assert table.startswith(f"Measured {written['date']} on {written['machine']}, commit ")
    assert "| hashing | 1,208 MB/s |" in table and table.endswith("one run")


def test_the_committed_tables_are_up_to_date() -> None:
    stale = render_tables.stale(render_tables.documents())
    assert not stale, f"stale tables in {stale}: run uv run python bench/render_tables.py"


def test_every_figures_json_renders_and_is_used() -> None:
    """Every file under docs/figures/ is valid, renders, and is named by some table marker."""
    text = "".join(p.read_text(encoding="utf-8") for p in render_tables.documents())
    for path in sorted((ROOT / "docs" / "figures").glob("*.json")):
        rel = path.relative_to(ROOT).as_posix()
        assert f"<!-- table: {rel}" in text, f"{rel} is rendered nowhere"
        assert render_tables.render(Path(rel)).strip()


def test_the_config_reference_is_generated_from_the_schema() -> None:
    for path, text in config_reference.generated().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(ROOT)} is stale: run uv run python bench/config_reference.py"
        )


def test_the_config_reference_names_every_schema_property() -> None:
    import yaml

    schema = yaml.safe_load((ROOT / "config" / "config.schema.yaml").read_text())
    keys = [key for key, _ in config_reference.rows(schema, schema, "")]
    reference = (ROOT / "config" / "README.md").read_text(encoding="utf-8")
    for key in keys:
        if "." in key:
            assert f"| `{key}` |" in reference
        else:
            assert f"## `{key}`" in reference
    assert "`runs.<run>.init.run`" in reference and "corpora.<corpus>.filter.max_duration" in keys


HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
GENERATED = re.compile(r"<!-- table: .*?<!-- end table -->", re.DOTALL)


def test_no_commit_hash_in_the_docs_prose() -> None:
    """Commits belong in generated tables (their commit column) and in CHANGELOG.md."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        prose = GENERATED.sub("", page.read_text(encoding="utf-8"))
        found = HASH.findall(prose)
        assert not found, f"{page.relative_to(ROOT)}: {found}"


def slug(heading: str) -> str:
    """The anchor MkDocs' toc gives a heading (lower case, punctuation dropped, spaces -)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return re.sub(r"[ ]+", "-", text)


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md", "config/README.md"])
def test_relative_links_outside_the_site_resolve(page: str) -> None:
    source = ROOT / page
    for target in LINK.findall(source.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        assert file.exists(), f"{page}: {target} does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {slug(h) for h in headings}, f"{page}: no anchor {target}"


def test_the_readme_keeps_its_two_commands_and_stays_short() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = "pip install uv && uv sync --locked --compile-bytecode && uv run"
    assert f"```bash\n{setup} snakemake\n```" in readme
    assert f"```bash\n{setup} pytest\n```" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install uv && uv sync --locked --compile-bytecode && uv run pytest" in ci
    assert len(readme.splitlines()) <= 200


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link, anchor or nav entry fails the build (mkdocs.yml: strict, validation)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "index.html").exists() and (tmp_path / "config" / "index.html").exists()
