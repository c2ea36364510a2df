"""The suite's own scheduling: tests/conftest.py starts the longest modules first."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import LONGEST_FIRST

REPO = Path(__file__).resolve().parents[1]


def test_every_module_started_first_exists_and_is_slow() -> None:
    """A renamed module would drop out of the list silently and run last again."""
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    for module in LONGEST_FIRST:
        assert "pytest.mark.slow" in (REPO / module).read_text(), module


def test_the_slow_modules_are_all_in_the_list() -> None:
    """A new slow module is placed on purpose (measured), not left to run last by default."""
    marked = re.compile(r"^pytestmark = .*\bpytest\.mark\.slow\b", re.M)
    slow = {
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if marked.search(path.read_text())
    }
    assert "tests/test_training_e2e.py" in slow  # the probe finds the module marks
    assert slow <= set(LONGEST_FIRST), sorted(slow - set(LONGEST_FIRST))
