"""SHA-256 digests of files and directory trees, with a persistent cache.

``HashCache`` remembers the digest of every file it has read, keyed by the file's real path and
checked against its size, mtime (ns) and inode, so unchanged inputs of later jobs are not read
again. The cache is a small SQLite database in WAL mode; several Snakemake jobs may use it at
once. It is only an accelerator: if the database cannot be opened or written, digests are still
computed, just not remembered. Verification (``asrflow verify``) never uses it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import sqlite3
import stat as stat_module
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

from asrflow.types import Pathlike

log = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20
"""Bytes read at a time when hashing (1 MiB)."""

CACHE_ENV = "ASRFLOW_HASH_CACHE"
DEFAULT_CACHE = Path("results/cache/sha256.sqlite")
TREE_IGNORED = frozenset({".snakemake_timestamp"})
"""File names left out of tree digests (Snakemake touches this in ``directory()`` outputs)."""


def sha256_file(path: Pathlike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            h.update(chunk)
    return h.hexdigest()


def sha256_json(data: Any) -> str:
    """Hex SHA-256 of ``data``'s canonical JSON (sorted keys, compact, ASCII): equal settings,
    however written, have one digest."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tree_files(directory: Pathlike) -> list[tuple[str, Path]]:
    """All files under ``directory`` as sorted ``(relative posix path, path)`` pairs.

    Symlinks to files are followed; symlinked directories are not descended into. Files named
    in :data:`TREE_IGNORED` are skipped.
    """
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            if name in TREE_IGNORED:
                continue
            p = Path(dirpath) / name
            if p.is_file():
                found.append((p.relative_to(root).as_posix(), p))
    found.sort()
    return found


def combine_tree(entries: Iterable[tuple[str, str]]) -> str:
    """Digest over ``(relative path, file digest)`` pairs, in sorted order."""
    h = hashlib.sha256()
    for rel, digest in sorted(entries):
        h.update(rel.encode("utf-8"))
        h.update(b"\0")
        h.update(digest.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def sha256_tree(directory: Pathlike, cache: HashCache | None = None) -> str:
    """Digest of a directory: sorted relative paths plus each file's SHA-256.

    Empty subdirectories do not contribute. With ``cache``, file digests come from it.
    """
    files = tree_files(directory)
    if cache is None:
        digests = {str(p): sha256_file(p) for _, p in files}
    else:
        digests = cache.sha256_many([p for _, p in files])
    return combine_tree((rel, digests[str(p)]) for rel, p in files)


def default_cache_path() -> Path:
    """``$ASRFLOW_HASH_CACHE`` if set, else ``results/cache/sha256.sqlite`` (cwd-relative)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else DEFAULT_CACHE


def _stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _retry_locked[T](fn: Callable[[], T], attempts: int = 20) -> T:
    """Call ``fn``, retrying with backoff while SQLite reports the database locked/busy."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if ("locked" not in msg and "busy" not in msg) or attempt == attempts - 1:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


class HashCache:
    """Persistent ``realpath -> sha256`` cache, valid while size, mtime_ns and inode match."""

    def __init__(self, path: Pathlike | None = None, timeout: float = 60.0) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._disabled = False

    # -- database -------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None or self._disabled:
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.timeout, check_same_thread=False)

            def setup() -> None:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                with conn:
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS files ("
                        " path TEXT PRIMARY KEY, size INTEGER NOT NULL,"
                        " mtime_ns INTEGER NOT NULL, ino INTEGER NOT NULL,"
                        " sha256 TEXT NOT NULL)"
                    )

            _retry_locked(setup)
        except (sqlite3.Error, OSError) as e:
            log.warning("hash cache %s unusable (%s); hashing without a cache", self.path, e)
            self._disabled = True
            return None
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the database connection (it is reopened on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lookup(self, keys: dict[str, tuple[int, int, int]]) -> dict[str, str]:
        conn = self._connect()
        if conn is None or not keys:
            return {}
        names = list(keys)
        found: dict[str, str] = {}
        with self._lock:
            for i in range(0, len(names), 500):
                batch = names[i : i + 500]
                marks = ",".join("?" * len(batch))
                q = f"SELECT path, size, mtime_ns, ino, sha256 FROM files WHERE path IN ({marks})"
                try:
                    rows = _retry_locked(lambda q=q, b=batch: conn.execute(q, b).fetchall())
                except sqlite3.Error as e:
                    log.warning("hash cache lookup failed (%s); re-reading files", e)
                    return found
                for path, size, mtime_ns, ino, digest in rows:
                    if keys[path] == (size, mtime_ns, ino):
                        found[path] = digest
        return found

    def _store(self, rows: list[tuple[str, int, int, int, str]]) -> None:
        conn = self._connect()
        if conn is None or not rows:
            return

        def write() -> None:
            with conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO files (path, size, mtime_ns, ino, sha256)"
                    " VALUES (?, ?, ?, ?, ?)",
                    rows,
                )

        with self._lock:
            try:
                _retry_locked(write)
            except sqlite3.Error as e:
                log.warning("hash cache update failed (%s); digests not remembered", e)

    # -- hashing --------------------------------------------------------------------------
    def sha256(self, path: Pathlike) -> str:
        """SHA-256 of one file (or of a directory tree), from the cache when unchanged."""
        if Path(path).is_dir():
            return sha256_tree(path, cache=self)
        return self.sha256_many([path], threads=1)[str(path)]

    def sha256_many(self, paths: Iterable[Pathlike], threads: int = 8) -> dict[str, str]:
        """Digests of many files, keyed by ``str(path)`` as given; misses are read in threads.

        Directories are hashed with :func:`sha256_tree` (their files through this cache).
        """
        given = list(dict.fromkeys(str(p) for p in paths))
        result: dict[str, str] = {}
        real_dirs: dict[str, str] = {}

        def resolve(chunk: list[str]) -> list[tuple[str, str, os.stat_result]]:
            # (path, real path, stat) without a realpath() per file: one per directory, plus
            # one for a file that is itself a symlink (stats on a network filesystem are slow,
            # hence threads; in chunks, as a task per file costs more than a local stat)
            out = []
            for p in chunk:
                head, tail = os.path.split(p)
                st = os.lstat(p)
                if stat_module.S_ISLNK(st.st_mode):
                    real = os.path.realpath(p)
                    st = os.stat(real)
                else:
                    if head not in real_dirs:
                        real_dirs[head] = os.path.realpath(head or ".")
                    real = os.path.join(real_dirs[head], tail)
                out.append((p, real, st))
            return out

        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            chunks = [given[i : i + 2048] for i in range(0, len(given), 2048)]
            resolved = [r for rs in pool.map(resolve, chunks) for r in rs]
            files, real, keys = [], {}, {}
            for p, r, st in resolved:
                if stat_module.S_ISDIR(st.st_mode):
                    result[p] = sha256_tree(p, cache=self)
                    continue
                files.append(p)
                real[p] = r
                keys[r] = _stat_key(st)
            cached = self._lookup(keys)
            misses = [p for p in files if real[p] not in cached]

            def read(p: str) -> tuple[str, str, os.stat_result]:
                digest = sha256_file(real[p])
                return p, digest, os.stat(real[p])

            rows = []
            for p, digest, after in pool.map(read, misses):
                cached[real[p]] = digest
                # Only remember a digest if the file did not change while it was being read.
                if _stat_key(after) == keys[real[p]]:
                    rows.append((real[p], *keys[real[p]], digest))
        self._store(rows)
        if misses:
            log.debug("hashed %d file(s), %d from cache", len(misses), len(files) - len(misses))
        for p in files:
            result[p] = cached[real[p]]
        return {p: result[p] for p in given}
