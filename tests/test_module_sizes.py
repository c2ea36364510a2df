"""A backstop, not a target: no module of ``src/asrflow`` over 600 lines, no function over 120.

Issue 13 gated at 420/75, and modules were split where the line count said, not where a concept
ended (issue 34). Split a module where its concept ends; these limits only catch a module or
function that has plainly stopped being one thing. ``-s`` prints the largest of each."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "asrflow"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 120  # with its signature and docstring


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_is_over_the_limit() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}
    print("largest modules:", {str(p.relative_to(SRC)): n for p, n in _largest(sizes)})
    assert not long, f"split these modules (lines): {long}"


def test_no_function_is_over_the_limit() -> None:
    sizes = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{path.relative_to(SRC)}:{node.lineno} {node.name}"
                sizes[name] = node.end_lineno - node.lineno + 1
    print("largest functions:", dict(_largest(sizes)))
    long = {name: n for name, n in sizes.items() if n > MAX_FUNCTION_LINES}
    assert not long, f"split these functions (lines): {long}"


def _largest(sizes: dict, count: int = 5) -> list:
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:count]
