"""ESPnet imported without typeguard's instrumentation (asrflow.espnet_import), in fresh
processes: a module once imported stays as it was first imported."""

from __future__ import annotations

import subprocess
import sys

from asrflow.espnet_import import KEEP_CHECKS
from tests.e2e import environment

PROBE = """
import typeguard
original = typeguard.typechecked
from asrflow.espnet_import import espnet_import
with espnet_import():
    from espnet2.asr.ctc import CTC
assert typeguard.typechecked is original, "typeguard was not restored"
names = CTC.__init__.__code__.co_names
print("instrumented" if "check_argument_types_internal" in names else "plain")
"""


def _probe(**env: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env={**{k: v for k, v in environment().items() if k != KEEP_CHECKS}, **env},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_espnet_imported_inside_is_not_instrumented_and_typeguard_is_restored():
    assert _probe() == "plain"


def test_the_environment_variable_keeps_the_checks():
    assert _probe(**{KEEP_CHECKS: "1"}) == "instrumented"


def test_the_stand_in_returns_what_it_decorates_in_both_forms():
    from asrflow.espnet_import import _unchecked

    def f(x: int) -> int:
        return x

    assert _unchecked(f) is f
    assert _unchecked(collection_check_strategy=None)(f) is f
