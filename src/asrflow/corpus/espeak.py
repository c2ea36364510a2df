"""A small ctypes wrapper around the eSpeak NG library shipped by ``espeakng-loader``.

Determinism: libespeak-ng keeps hidden static state between calls (the pitch-flutter phase, the
gain control, the roughness cycle counter, ...) that no API call resets, so the same text spoken
twice in one process gives different samples. :func:`synthesize` therefore loads a *private copy*
of the library (copied once per process into a temporary directory, so nobody else in the process
shares its state), initialises it, speaks, terminates and unloads it again, on every call: each
call starts from the library's pristine state. That costs about 2 ms per call. eSpeak's own noise
generator and libc ``rand()`` are reseeded from ``seed`` too. Calls are serialised by a lock.

Example::

    samples = synthesize("hello world", voice="en+m3", rate=170, pitch=50)   # int16, 22050 Hz
    audio = resample(samples, native_sample_rate(), 16000)                    # float64
"""

from __future__ import annotations

import _ctypes
import atexit
import ctypes
import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from math import gcd
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

from asrflow.types import Hz

logger = logging.getLogger(__name__)

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_PARAM_RATE, _PARAM_VOLUME, _PARAM_PITCH, _PARAM_RANGE = 1, 2, 3, 4

_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class EspeakError(RuntimeError):
    """eSpeak NG could not be loaded, or refused a voice, parameter or text."""


class _Library:
    """Process-wide facts: the private library copy, the voice data and libc's ``srand``."""

    def __init__(self) -> None:
        import espeakng_loader  # the library is looked for when a voice first speaks

        source = Path(espeakng_loader.get_library_path())
        self.data_path = espeakng_loader.get_data_path().encode()
        self.path = str(source)
        try:
            tmp_dir = tempfile.mkdtemp(prefix="asrflow-espeak-")
            atexit.register(shutil.rmtree, tmp_dir, True)
            copy = str(Path(tmp_dir) / source.name)
            shutil.copyfile(source, copy)
            _ctypes.dlclose(ctypes.CDLL(copy)._handle)  # fails where the temp dir is noexec
            self.path = copy
        except OSError as exc:
            logger.warning(
                "eSpeak NG: no private library copy (%s); using %s, whose state "
                "other users in this process may share",
                exc,
                source,
            )
        libc = ctypes.CDLL(None)
        libc.srand.argtypes = [ctypes.c_uint]
        libc.srand.restype = None
        self.srand = libc.srand
        self.sample_rate: Hz = 0
        logger.debug("eSpeak NG: loading %s for every call", self.path)


_library: _Library | None = None
_lock = threading.Lock()


def _get_library() -> _Library:
    global _library
    if _library is None:
        _library = _Library()
    return _library


def _declare(lib: ctypes.CDLL) -> None:
    """Set the argument and return types of the functions used."""
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Terminate.argtypes = []
    lib.espeak_Terminate.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
    lib.espeak_ng_SetRandSeed.restype = ctypes.c_int
    lib.espeak_Synth.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_uint),
        ctypes.c_void_p,
    ]
    lib.espeak_Synth.restype = ctypes.c_int


@contextmanager
def _fresh_engine() -> Iterator[tuple[ctypes.CDLL, Hz]]:
    """Load, initialise, then terminate and unload the private library copy (lock held)."""
    info = _get_library()
    try:
        lib = ctypes.CDLL(info.path)
    except OSError as exc:
        raise EspeakError(f"cannot load libespeak-ng from {info.path}: {exc}") from exc
    try:
        _declare(lib)
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, info.data_path, 0)
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed ({rate}) with data {info.data_path!r}")
        info.sample_rate = rate
        try:
            yield lib, rate
        finally:
            lib.espeak_Terminate()
    finally:
        _ctypes.dlclose(lib._handle)


def native_sample_rate() -> Hz:
    """The sampling rate eSpeak NG synthesises at (22050 Hz for the bundled voices)."""
    with _lock:
        if _get_library().sample_rate <= 0:
            with _fresh_engine():
                pass
        return _get_library().sample_rate


def synthesize(
    text: str,
    voice: str = "en",
    rate: int = 175,
    pitch: int = 50,
    pitch_range: int = 50,
    seed: int = 0,
) -> np.ndarray:
    """Speak ``text`` and return mono int16 samples at :func:`native_sample_rate`.

    ``voice`` is an eSpeak voice name, optionally with a variant (``"en+m3"``, ``"es+f2"``);
    ``rate`` is in words per minute (80-450), ``pitch`` and ``pitch_range`` are 0-100. The same
    arguments always give the same samples, whatever was synthesised before; ``seed`` seeds the
    random breath/aspiration noise (and, as a side effect, libc ``rand()``).
    """
    if not 80 <= rate <= 450:
        raise ValueError(f"rate must be in 80..450 words per minute, got {rate}")
    for name, value in (("pitch", pitch), ("pitch_range", pitch_range)):
        if not 0 <= value <= 100:
            raise ValueError(f"{name} must be in 0..100, got {value}")
    chunks: list[bytes] = []

    def on_audio(wav: ctypes._Pointer, numsamples: int, events: int) -> int:
        if wav and numsamples > 0:
            chunks.append(ctypes.string_at(wav, numsamples * 2))
        return 0

    callback = _SynthCallback(on_audio)  # referenced until the library is unloaded
    data = text.encode("utf-8") + b"\0"
    with _lock, _fresh_engine() as (lib, _):
        lib.espeak_SetSynthCallback(callback)
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise EspeakError(f"unknown eSpeak voice {voice!r}")
        for param, value in (
            (_PARAM_RATE, rate),
            (_PARAM_VOLUME, 100),
            (_PARAM_PITCH, pitch),
            (_PARAM_RANGE, pitch_range),
        ):
            if lib.espeak_SetParameter(param, int(value), 0) != 0:
                raise EspeakError(f"espeak_SetParameter({param}, {value}) failed")
        lib.espeak_ng_SetRandSeed(int(seed))
        _get_library().srand(int(seed) & 0xFFFFFFFF)
        status = lib.espeak_Synth(
            data, len(data), 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None
        )
        if status != 0:
            raise EspeakError(f"espeak_Synth failed ({status}) for {text!r}")
    return np.frombuffer(b"".join(chunks), dtype=np.int16).copy()


def resample(samples: np.ndarray, from_rate: Hz, to_rate: Hz) -> np.ndarray:
    """Polyphase-resample ``samples`` (any numeric dtype) to ``to_rate``; returns float64.

    22050 -> 16000 Hz is ``resample_poly(x, 320, 441)``.
    """
    x = np.asarray(samples, dtype=np.float64)
    if from_rate == to_rate:
        return x.copy()
    g = gcd(int(from_rate), int(to_rate))
    return resample_poly(x, int(to_rate) // g, int(from_rate) // g)
