"""Importing ESPnet without typeguard's import-time instrumentation.

ESPnet decorates some 570 functions, nearly all ``__init__`` methods, with typeguard's
``@typechecked``, which instruments each one *when its module is imported*: it reads the
function's source, rewrites its syntax tree and compiles it again. Measured on the 2-core CI
machine: importing ``espnet2.bin.asr_inference`` takes 6.1 s with it and 3.6 s without, and every
train, smoke, export and evaluate job pays it once. The instrumented functions would check the
types of their arguments on each call: a development aid, which ``python -O`` turns off in the
same way (typeguard then returns what it decorates); no computed value depends on it.

:func:`espnet_import` turns it off for the imports made inside it::

    with espnet_import():
        from espnet2.tasks.asr import ASRTask

and leaves typeguard as it was afterwards (modules imported later are instrumented as usual).
``ASRFLOW_ESPNET_TYPECHECKS=1`` keeps the checks, e.g. while writing a model class of one's own
that ESPnet builds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

KEEP_CHECKS = "ASRFLOW_ESPNET_TYPECHECKS"
"""Environment variable: ``1`` keeps typeguard's checks in ESPnet's modules."""


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typeguard.typechecked`` as under ``python -O``: the decorated object, unchanged."""
    return target if target is not None else _unchecked


@contextmanager
def espnet_import() -> Iterator[None]:
    """Within it, ``typeguard.typechecked`` returns what it decorates (see the module)."""
    if os.environ.get(KEEP_CHECKS) == "1":
        yield
        return
    try:
        import typeguard
    except ImportError:  # an ESPnet without typeguard: nothing to turn off
        yield
        return
    original = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        yield
    finally:
        typeguard.typechecked = original
