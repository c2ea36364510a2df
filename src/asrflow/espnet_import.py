"""Importing ESPnet without the import-time work that no asrflow job uses.

Every train, smoke, export and evaluate job imports ESPnet once; three things ESPnet does at
import cost those jobs seconds and change nothing they compute:

- **typeguard's instrumentation.** ESPnet decorates some 570 functions, nearly all ``__init__``
  methods, with typeguard's ``@typechecked``, which instruments each one *when its module is
  imported*: it reads the function's source, rewrites its syntax tree and compiles it again
  (importing ``espnet2.bin.asr_inference`` took 6.1 s with it and 3.6 s without on the 2-core CI
  machine). The instrumented functions would check the types of their arguments on each call: a
  development aid, which ``python -O`` turns off in the same way (typeguard then returns what it
  decorates); no computed value depends on it.
- **``torch.compiler.disable`` marks.** A few of ESPnet's helpers (``make_pad_mask`` and the like)
  are decorated with ``@torch.compiler.disable``, which imports TorchDynamo, the ``torch.compile``
  tracer, to wrap them. Nothing in an asrflow job compiles a model, and outside a compiled region
  the wrapper only calls the function; within :func:`espnet_import` the decorator returns the
  function as it is, and a job that does not import Lightning (export, evaluate) never imports
  TorchDynamo.
- **The TTS alignment module.** ``espnet2.main_funcs.calculate_all_attentions`` (ESPnet's own
  trainer plots attention maps with it) imports ``espnet2.gan_tts.jets.alignments`` (numba) only
  to test whether a module is a JETS text-to-speech aligner. Within :func:`espnet_import` that
  import finds a stand-in whose ``AlignmentModule`` no module is an instance of, which is the
  answer for every ASR model; afterwards the stand-in is gone, so an import of the real module
  later gets the real one.
- **SciPy's signal module.** ``espnet2.train.preprocessor`` imports ``scipy.signal`` at its top
  (0.8 s) for the room-impulse convolutions and windows of its training augmentations, which
  no export or evaluate job runs. Within :func:`espnet_import`, ``scipy.signal`` (when not
  yet imported) is a :class:`Deferred` module: the real one is imported when first used, by
  whoever uses it. A train job imports it anyway (Lightning's metrics do).

Together the last three take about two seconds off each such job's import of ESPnet (the
start-up table of docs/performance.md). :func:`espnet_import` does all four for the imports made
inside it::

    with espnet_import():
        from espnet2.tasks.asr import ASRTask

and leaves typeguard and ``torch.compiler`` as they were afterwards (modules imported later are
instrumented and marked as usual). ``ASRFLOW_ESPNET_TYPECHECKS=1`` keeps the type checks, e.g.
while writing a model class of one's own that ESPnet builds; ``ASRFLOW_ESPNET_AS_IS=1`` imports
ESPnet exactly as it is (type checks, compile marks, the TTS aligner), e.g. to ``torch.compile``
its model.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch.compiler

KEEP_CHECKS = "ASRFLOW_ESPNET_TYPECHECKS"
"""Environment variable: ``1`` keeps typeguard's checks in ESPnet's modules."""

AS_IS = "ASRFLOW_ESPNET_AS_IS"
"""Environment variable: ``1`` imports ESPnet exactly as it is (see the module)."""

STAND_INS: dict[str, tuple[str, ...]] = {
    "espnet2.gan_tts.jets.alignments": ("AlignmentModule",),
}
"""Modules that ESPnet's ASR path imports only for ``isinstance`` tests against their classes,
and the classes it imports from each (see the module)."""

DEFERRED = ("scipy.signal",)
"""Modules that ESPnet imports at its modules' tops but uses only in training augmentations:
loaded on first use (see the module)."""


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typeguard.typechecked`` as under ``python -O``: the decorated object, unchanged."""
    return target if target is not None else _unchecked


def _not_compiled(fn: Callable[..., Any] | None = None, *_args: Any, **_options: Any) -> Any:
    """``torch.compiler.disable`` in a process that compiles nothing: the function, unchanged
    (in both forms, ``@disable`` and ``@disable(recursive=False)``)."""
    return fn if fn is not None else _not_compiled


def stand_in(name: str, classes: tuple[str, ...]) -> types.ModuleType:
    """A module called ``name`` whose ``classes`` are classes of their own, of which nothing
    is an instance."""
    module = types.ModuleType(name, f"asrflow.espnet_import's stand-in for {name}")
    for cls in classes:
        doc = f"A stand-in: ESPnet's ASR path only tests isinstance() against {name}.{cls}."
        setattr(module, cls, type(cls, (), {"__doc__": doc, "__module__": name}))
    return module


@contextmanager
def _typeguard_off() -> Iterator[None]:
    if os.environ.get(KEEP_CHECKS) == "1":
        yield
        return
    try:
        import typeguard  # ESPnet's dependency, not ours: it may be absent
    except ImportError:  # an ESPnet without typeguard: nothing to turn off
        yield
        return
    original = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        yield
    finally:
        typeguard.typechecked = original


@contextmanager
def _compile_marks_off() -> Iterator[None]:
    original = torch.compiler.disable
    torch.compiler.disable = _not_compiled
    try:
        yield
    finally:
        torch.compiler.disable = original


@contextmanager
def _stand_ins() -> Iterator[None]:
    """Each :data:`STAND_INS` module not yet imported is a stand-in while inside."""
    placed = {}
    for name, classes in STAND_INS.items():
        if name not in sys.modules:
            placed[name] = sys.modules[name] = stand_in(name, classes)
    try:
        yield
    finally:
        for name, module in placed.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


class Deferred(types.ModuleType):
    """Stands in for a module until an attribute of it is first asked for: then the real module
    is imported, takes its place (in ``sys.modules`` and on its package) and answers.

    Not :class:`importlib.util.LazyLoader`: its module loads as soon as an ``import`` statement
    names it again (the import system reads its ``__spec__``), which ESPnet's modules do."""

    def __getattr__(self, attr: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def defer(name: str) -> None:
    """``name``, when not yet imported, a :class:`Deferred` module (its package imported)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:  # not installed: ESPnet's own import will say so
        return
    module = Deferred(name, f"asrflow.espnet_import defers {name} until it is used")
    module.__spec__ = spec
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)  # as the import system does for a submodule


@contextmanager
def espnet_import() -> Iterator[None]:
    """Within it, ESPnet imports without typeguard's instrumentation, ``torch.compiler.disable``
    marks or the TTS aligner, and SciPy's signal module loads when first used (see the
    module)."""
    with ExitStack() as stack:
        if os.environ.get(AS_IS) != "1":
            stack.enter_context(_typeguard_off())
            stack.enter_context(_compile_marks_off())
            stack.enter_context(_stand_ins())
            for name in DEFERRED:
                defer(name)
        yield
