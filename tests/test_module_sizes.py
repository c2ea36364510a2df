"""Issue 13's size limits, kept: no module of ``src/asrflow`` over ~400 lines, no function over
~60 (the limits below leave a little room; a module or function that outgrows them is split,
not the limit raised)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "asrflow"
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 75  # with its signature and docstring


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_is_over_the_limit() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules (lines): {long}"


def test_no_function_is_over_the_limit() -> None:
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(SRC)}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these functions (lines): {long}"
