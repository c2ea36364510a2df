"""The import layers of issue 13, checked with import-linter (contracts in pyproject.toml):
evaluation, selection, export, reporting and data never import the training stack; stages import
only earlier stages; building the DAG never imports torch; no import cycles."""

from __future__ import annotations

import ast
import io
import os
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is a dev dependency (uv sync installs it)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [exe, "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "6 kept, 0 broken" in proc.stdout, proc.stdout[-2000:]


def _unexplained_imports(text: str) -> list[int]:
    """Lines of the imports inside functions of module ``text`` that say no reason: neither a
    comment on their line nor one on the line just above the run of imports they are in (a
    comment line, or the ``with`` that the imports are in)."""
    commented = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    }
    found = set()
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for block in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(block, field, None)  # a lambda's body is one expression
                first = None  # the first import of the run of imports being read
                for stmt in body if isinstance(body, list) else []:
                    if not isinstance(stmt, ast.Import | ast.ImportFrom):
                        first = None
                        continue
                    first = first or stmt
                    if not {stmt.lineno, first.lineno - 1} & commented:
                        found.add(stmt.lineno)
    return sorted(found)


def test_the_import_reason_check_finds_a_silent_import() -> None:
    module = (
        "def f():\n    import json\n\n"
        "def g():\n    # json only here\n    import json\n    import os\n\n"
        "def h():\n    import json  # only here\n    if True:\n        import os\n"
    )
    assert _unexplained_imports(module) == [2, 12]


def test_every_import_inside_a_function_says_why() -> None:
    """An import belongs at the top of its module; one inside a function (to keep torch, ESPnet
    or Lightning out of a process that does not need them, or to break a cycle) says why in a
    comment on its line or just above its run of imports."""
    silent = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "src/asrflow").rglob("*.py"))
        for line in _unexplained_imports(path.read_text(encoding="utf-8"))
    ]
    assert not silent, (
        "move these imports to the top of the module, or say why they wait (a comment): "
        + ", ".join(silent)
    )
