"""Reading audio headers fast, for every file a corpus names: rate, frames, channels, and
whether the file holds as many frames as its header declares.

Canonical PCM WAV headers (what libsndfile, sox and eSpeak write) are parsed in Python, several
times faster than libsndfile and without soundfile's global lock; everything else goes through
libsndfile. :func:`read_audio_infos` reads many in parallel threads.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import soundfile

from asrflow.types import Hz, Pathlike, Seconds


@dataclass(frozen=True)
class AudioInfo:
    """What a header read tells about one audio file."""

    sampling_rate: Hz
    num_samples: int
    channels: int
    header_samples: int | None = None
    """Frames the header declares, when that is more than the file holds (a truncated file)."""

    @property
    def duration(self) -> Seconds:
        return self.num_samples / self.sampling_rate


_WAV_HEADER = struct.Struct("<4sI4s4sIHHIIHH4sI")
"""The canonical 44-byte RIFF/WAVE header: RIFF, size, WAVE, fmt, 16, PCM, ..., data, size."""


def _canonical_wav_info(path: str) -> AudioInfo | None:
    """Header of a canonical 44-byte-header PCM WAV file, parsed in Python; else ``None``.

    Only the plain layout libsndfile itself (and sox, espeak-ng) writes is accepted: ``RIFF``
    size = file size - 8, a 16-byte ``fmt`` chunk of integer PCM (8/16/24/32 bit) whose block
    align and byte rate agree with channels and rate, then the ``data`` chunk holding exactly the
    rest of the file, a whole number of frames. For such a file libsndfile reports exactly these
    numbers; anything else (other chunks, extensible/float formats, truncation, an I/O error)
    returns ``None`` and is left to libsndfile, so errors and odd files behave as before.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except (OSError, ValueError):
        return None
    try:
        head = os.read(fd, _WAV_HEADER.size)
        size = os.fstat(fd).st_size
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(head) != _WAV_HEADER.size:
        return None
    (
        riff,
        riff_size,
        wave,
        fmt,
        fmt_size,
        tag,
        channels,
        rate,
        byte_rate,
        align,
        bits,
        data,
        data_size,
    ) = _WAV_HEADER.unpack(head)
    if (
        riff != b"RIFF"
        or wave != b"WAVE"
        or fmt != b"fmt "
        or data != b"data"
        or fmt_size != 16
        or tag != 1
        or bits not in (8, 16, 24, 32)
        or not 1 <= channels <= 1024
        or not 1 <= rate <= 655350
        or align != channels * bits // 8
        or byte_rate != rate * align
        or riff_size != size - 8
        or data_size != size - _WAV_HEADER.size
        or data_size % align
    ):
        return None
    return AudioInfo(sampling_rate=rate, num_samples=data_size // align, channels=channels)


_CHUNK = struct.Struct("<4sI")
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)
"""``data`` sizes that streaming writers leave in place of the real size: not a claim."""


def wav_declared_frames(path: Pathlike) -> int | None:
    """Frames the ``data`` chunk of a RIFF/WAVE file declares, from its header alone.

    libsndfile reports the frames the file *holds*, so a truncated file (an interrupted copy)
    reads as a shorter, valid one; comparing with this number finds it. ``None`` when the file
    is not RIFF/WAVE, has no ``fmt``/``data`` chunk, or declares a streaming placeholder size.
    """
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        align = None
        while chunk := f.read(_CHUNK.size):
            if len(chunk) < _CHUNK.size:
                return None
            name, size = _CHUNK.unpack(chunk)
            if name == b"fmt ":
                body = f.read(size + (size & 1))
                if len(body) < 14:
                    return None
                align = struct.unpack_from("<H", body, 12)[0]
            elif name == b"data":
                if not align or size in _UNKNOWN_SIZES:
                    return None
                return size // align
            else:
                f.seek(size + (size & 1), os.SEEK_CUR)
    return None


def read_audio_info(path: Pathlike) -> AudioInfo:
    """Read an audio header (no decode). Raises ``RuntimeError``/``OSError`` when it cannot.

    Canonical PCM WAV headers are parsed directly (several times faster than going through
    libsndfile, and not serialized by soundfile's global open lock); every other file, and every
    failure, goes through libsndfile.
    """
    path = str(path)
    fast = _canonical_wav_info(path)
    if fast is not None:
        return fast
    with soundfile.SoundFile(path) as f:
        info = AudioInfo(
            sampling_rate=int(f.samplerate),
            num_samples=int(f.frames),
            channels=int(f.channels),
        )
        is_wav = f.format in ("WAV", "WAVEX")
    declared = wav_declared_frames(path) if is_wav else None
    if declared is not None and declared > info.num_samples:
        info = replace(info, header_samples=declared)
    return info


def unreadable(path: Pathlike, error: Exception, failed: str = "cannot be opened") -> str:
    """Why the audio ``path`` could not be read (``error``), for a message: ``"does not exist"``,
    ``"is an empty file (0 bytes)"`` (libsndfile says only "Format not recognised") or
    ``"<failed> (<error>)"``."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return "does not exist"
    except OSError:
        size = None
    if size == 0:
        return "is an empty file (0 bytes): copy it again from its source"
    return f"{failed} ({error})"


def read_audio_infos(paths: Iterable[str], threads: int = 16) -> dict[str, AudioInfo | Exception]:
    """Header-read many files in parallel; failures come back as the exception.

    The files are handed to the threads in chunks (one task per file would cost more than a
    cached header read); the threads overlap the file-system latency of opens and reads.
    """

    def one(path: str) -> AudioInfo | Exception:
        try:
            return read_audio_info(path)
        except Exception as exc:
            return exc

    def chunk(part: list[str]) -> list[AudioInfo | Exception]:
        return [one(path) for path in part]

    unique = sorted(set(paths))
    threads = max(1, threads)
    if threads == 1 or len(unique) <= 1:
        return dict(zip(unique, chunk(unique), strict=True))
    size = max(1, min(256, -(-len(unique) // threads)))
    parts = [unique[i : i + size] for i in range(0, len(unique), size)]
    with ThreadPoolExecutor(max_workers=min(threads, len(parts))) as pool:
        results = [info for part in pool.map(chunk, parts) for info in part]
    return dict(zip(unique, results, strict=True))
