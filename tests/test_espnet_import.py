"""ESPnet imported without typeguard's instrumentation (asrflow.espnet_import), in fresh
processes: a module once imported stays as it was first imported."""

from __future__ import annotations

import subprocess
import sys

from asrflow.espnet_import import AS_IS, KEEP_CHECKS
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


IMPORT_PROBE = """
import sys
import torch.compiler
original = torch.compiler.disable
from asrflow.espnet_import import STAND_INS, espnet_import
with espnet_import():
    import espnet2.bin.asr_inference
    from espnet2.main_funcs.calculate_all_attentions import AlignmentModule
assert torch.compiler.disable is original, "torch.compiler.disable was not restored"
left = [n for n in STAND_INS if "stand-in" in (getattr(sys.modules.get(n), "__doc__", "") or "")]
assert not left, f"a stand-in was left behind: {left}"
print("dynamo" if "torch._dynamo" in sys.modules else "no-dynamo")
print("numba" if "numba" in sys.modules else "no-numba")
print(AlignmentModule.__doc__.split(":")[0])
from espnet2.gan_tts.jets.alignments import AlignmentModule as Real  # imported for real now
print(Real is AlignmentModule)
"""


def _import_probe(**env: str) -> list[str]:
    clean = {k: v for k, v in environment().items() if k not in (KEEP_CHECKS, AS_IS)}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split("\n")[:4]


def test_espnet_imports_without_torchdynamo_or_the_tts_aligner_and_restores_both():
    """ESPnet's inference module imported inside espnet_import() pulls in neither TorchDynamo
    (its torch.compiler.disable marks) nor numba (the JETS aligner, a stand-in while inside);
    both are as they were afterwards, and the real aligner imports later."""
    assert _import_probe() == ["no-dynamo", "no-numba", "A stand-in", "False"]


def test_as_is_imports_espnet_untouched():
    dynamo, numba, doc, same = _import_probe(**{AS_IS: "1"})
    assert (dynamo, numba, same) == ("dynamo", "numba", "True")
    assert not doc.startswith("A stand-in")


def test_the_compile_mark_stand_in_returns_the_function_in_both_forms():
    from asrflow.espnet_import import _not_compiled

    def f(x: int) -> int:
        return x

    assert _not_compiled(f) is f
    assert _not_compiled(recursive=False)(f) is f
    assert _not_compiled(f, False) is f


DEFER_PROBE = """
import sys
from asrflow.espnet_import import espnet_import
with espnet_import():
    import espnet2.bin.asr_inference
    import espnet2.train.preprocessor as preprocessor
print(type(sys.modules["scipy.signal"]).__name__)
window = preprocessor.scipy.signal.get_window("hann", 4)  # ESPnet's way to it, first use
import scipy.signal
print(type(sys.modules["scipy.signal"]).__name__, preprocessor.scipy.signal is scipy.signal)
print(window.shape == (4,) and scipy.signal.get_window("hann", 4).tolist() == window.tolist())
"""


def test_scipy_signal_is_imported_when_first_used_and_then_is_the_real_module():
    clean = {k: v for k, v in environment().items() if k not in (KEEP_CHECKS, AS_IS)}
    proc = subprocess.run(
        [sys.executable, "-c", DEFER_PROBE],
        capture_output=True,
        text=True,
        env=clean,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:3] == ["Deferred", "module True", "True"], proc.stdout
