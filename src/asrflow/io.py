"""Atomic, content-stable file writes.

Every artifact asrflow writes goes through this module: the data is written to a temporary file
beside the target and renamed into place, so a reader never sees a half-written file. If the
target already holds byte-identical content, the temporary file is dropped and the target is left
untouched (its mtime stays), so reruns that reproduce the same bytes look unchanged downstream.

A write that fails for lack of room (a full disk, an exhausted quota, a file-size limit) raises
:class:`WriteFailed`, naming the target; the temporary file is removed and the target keeps its
old content, so a rerun after freeing space starts from a clean state.

Example::

    with atomic_output("results/x.bin") as tmp:
        tmp.write_bytes(payload)          # or hand ``tmp`` to a library that writes a path
"""

from __future__ import annotations

import errno
import fcntl
import filecmp
import gzip
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

_NO_ROOM = frozenset(
    code for code in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if code
)
_TORCH_WRITE_FAILURES = ("PytorchStreamWriter failed", "unexpected pos", "file write failed")
"""How ``torch.save`` reports a write cut short: a ``RuntimeError`` from its zip writer, without
an errno (measured with torch 2.14 under a file-size limit: ``unexpected pos 704 vs 598``)."""


class WriteFailed(AsrflowError):
    """A file could not be written whole: no room left on its disk, quota or file-size limit."""


def is_write_failure(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) says a write ran out of room:
    ``ENOSPC``, ``EFBIG`` or ``EDQUOT``, or ``torch.save``'s zip writer failing."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _NO_ROOM:
            return True
        if isinstance(current, RuntimeError) and any(
            m in str(current) for m in _TORCH_WRITE_FAILURES
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def write_failed(
    target: Pathlike,
    exc: BaseException,
    *,
    kept: str = "keeps its previous content",
    absent: str = "was not created",
) -> WriteFailed:
    """The :class:`WriteFailed` for ``target`` whose write failed with ``exc``.

    The message says what a reader finds now: ``"<target> <kept>"`` when the target exists (its
    old content), else ``"<target> <absent>"``.
    """
    target = Path(target)
    found = f"{target} {kept if target.exists() else absent}"
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return WriteFailed(
        f"{target}: could not be written whole ({type(exc).__name__}: {reason}); the disk, the "
        f"quota or the file-size limit ran out of room. Nothing half-written was kept: {found}. "
        f"Free space on the filesystem of {target.parent} and rerun"
    )


@contextmanager
def file_lock(path: Pathlike) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its folder, if missing) while the
    block runs: one process at a time, across processes of any kind on this machine."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def atomic_output(path: Pathlike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success move it into place.

    ``suffix`` defaults to the target's own suffixes, so libraries that pick a format from the
    file name (``.jsonl.gz``, ``.wav``) still do the right thing. On an exception the temporary
    file is removed and the target is untouched; a failure for lack of room is raised as
    :class:`WriteFailed`. If the new content equals the old, the target keeps its mtime.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if suffix is None:
        suffix = "".join(target.suffixes) or ".tmp"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        commit(tmp, target)
    except Exception as exc:
        if not isinstance(exc, WriteFailed) and is_write_failure(exc):
            raise write_failed(target, exc) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)


def commit(tmp: Path, target: Path) -> bool:
    """Rename ``tmp`` onto ``target`` unless ``target`` already has the same bytes.

    Returns True when ``target`` was (re)written.
    """
    if target.is_file() and filecmp.cmp(tmp, target, shallow=False):
        tmp.unlink()
        return False
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return True


def same_files(a: Path, b: Path) -> bool:
    """True when directories ``a`` and ``b`` hold the same file names with the same bytes."""
    names_a = sorted(p.name for p in a.iterdir())
    names_b = sorted(p.name for p in b.iterdir())
    if names_a != names_b or not all((a / n).is_file() and (b / n).is_file() for n in names_a):
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, names_a, shallow=False)
    return not mismatch and not errors


def publish_dir(tmp: Path, out: Path) -> bool:
    """Move the finished directory ``tmp`` (built beside ``out``) to ``out``, unless ``out``
    already holds the same files (then ``tmp`` is removed and ``out`` keeps its mtimes).
    A reader never sees a half-written ``out``: the old one is moved aside first and removed
    after. Returns True when ``out`` was (re)written."""
    if out.is_dir() and same_files(tmp, out):
        shutil.rmtree(tmp)
        return False
    os.chmod(tmp, 0o755)
    for p in tmp.iterdir():
        os.chmod(p, 0o644)
    replace_dir(tmp, out)
    return True


def build_dir_once(
    out_dir: Pathlike, record: Mapping[str, Any], write: Callable[[Path], object]
) -> bool:
    """Build the directory ``out_dir`` from ``record`` (the JSON-able settings that decide its
    bytes) unless its ``settings.json`` already holds the same record: ``write(tmp)`` fills a
    temporary directory beside it, ``record`` goes into ``tmp/settings.json``, and the finished
    directory replaces ``out_dir`` (:func:`replace_dir`; readable by all, as
    :func:`publish_dir` leaves it). Returns True when it was built."""
    out = Path(out_dir)
    record = json.loads(json.dumps(record))  # tuples as lists, as read back
    if (out / "settings.json").is_file() and read_json(out / "settings.json") == record:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        write(tmp)
        (tmp / "settings.json").write_text(dumps_json(record), encoding="utf-8")
        os.chmod(tmp, 0o755)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished directory ``tmp`` to ``out``; an old ``out`` is moved aside first and
    removed after, so a reader never sees a half-written ``out``."""
    old = None
    if out.exists() or out.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
        os.replace(out, old / out.name)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old)


def write_bytes(path: Pathlike, data: bytes) -> None:
    """Atomically write ``data`` to ``path``."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: Pathlike, text: str) -> None:
    """Atomically write UTF-8 ``text`` to ``path``."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def dumps_json(obj: Any) -> str:
    """Stable JSON text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def read_json(path: Pathlike) -> Any:
    """The JSON document in ``path`` (UTF-8)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_json(path: Pathlike, obj: Any) -> None:
    """Atomically write ``obj`` as stable JSON (sorted keys) to ``path``."""
    write_text(path, dumps_json(obj))


def write_jsonl_gz(path: Pathlike, records: Iterable[dict[str, Any]]) -> int:
    """Atomically write dicts as gzip-compressed JSON lines, byte-reproducibly.

    ``gzip.open`` stamps the current time into the header, so two runs over the same data give
    different bytes; this writer fixes the header (mtime 0, no file name) instead.
    Returns the number of records written.
    """
    n = 0
    with (
        atomic_output(path) as tmp,
        open(tmp, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
        io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as text,
    ):
        for record in records:
            text.write(json.dumps(record, ensure_ascii=False))
            text.write("\n")
            n += 1
    return n
