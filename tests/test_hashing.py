"""Tests for asrflow.hashing: file/tree digests and the persistent sha256 cache."""

import hashlib
import logging
import os
import threading
from pathlib import Path

import pytest

from asrflow import hashing
from asrflow.hashing import HashCache, default_cache_path, sha256_file, sha256_tree


def _counting_reader(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wrap hashing.sha256_file so every real read is recorded."""
    calls: list[str] = []
    real = hashing.sha256_file

    def counting(path):
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(hashing, "sha256_file", counting)
    return calls


def test_sha256_file_matches_hashlib_across_chunks(tmp_path: Path) -> None:
    data = os.urandom(hashing.CHUNK_SIZE * 2 + 123)
    f = tmp_path / "big.bin"
    f.write_bytes(data)
    assert sha256_file(f) == hashlib.sha256(data).hexdigest()


def test_cached_file_is_not_reread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.txt"
    f.write_text("hello")
    calls = _counting_reader(monkeypatch)
    cache = HashCache(tmp_path / "c.sqlite")
    first = cache.sha256(f)
    assert first == hashlib.sha256(b"hello").hexdigest()
    assert len(calls) == 1
    assert cache.sha256(f) == first
    assert len(calls) == 1, "an unchanged file must come from the cache"
    cache.close()
    # Persistent: a new cache object (another job) does not read it either.
    assert HashCache(tmp_path / "c.sqlite").sha256(f) == first
    assert len(calls) == 1


def test_changed_content_and_mtime_rehashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "a.txt"
    f.write_text("hello")
    cache = HashCache(tmp_path / "c.sqlite")
    before = cache.sha256(f)
    calls = _counting_reader(monkeypatch)
    st = f.stat()
    f.write_text("HELLO")  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    after = cache.sha256(f)
    assert len(calls) == 1
    assert after == hashlib.sha256(b"HELLO").hexdigest() != before


def test_sha256_many_keys_as_given_and_uses_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = []
    for i in range(20):
        f = tmp_path / f"f{i}.txt"
        f.write_text(f"content {i}")
        files.append(f)
    cache = HashCache(tmp_path / "c.sqlite")
    calls = _counting_reader(monkeypatch)
    got = cache.sha256_many(files, threads=4)
    assert set(got) == {str(f) for f in files}
    assert all(got[str(f)] == hashlib.sha256(f.read_bytes()).hexdigest() for f in files)
    assert len(calls) == 20
    got2 = cache.sha256_many([str(f) for f in files] + [str(files[0])])
    assert got2 == got
    assert len(calls) == 20


def test_sha256_many_hashes_directories_as_trees(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "x").write_text("x")
    (d / "sub" / "y").write_text("y")
    cache = HashCache(tmp_path / "c.sqlite")
    assert cache.sha256_many([d])[str(d)] == sha256_tree(d)
    assert cache.sha256(d) == sha256_tree(d)


def test_sha256_tree_depends_on_names_and_contents(tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    for root, order in ((a, ["1", "2"]), (b, ["2", "1"])):
        (root / "s").mkdir(parents=True)
        for name in order:
            (root / "s" / name).write_text(name)
    assert sha256_tree(a) == sha256_tree(b), "creation order must not matter"
    (b / "s" / "2").rename(b / "s" / "3")
    assert sha256_tree(a) != sha256_tree(b)
    (b / "s" / "3").rename(b / "s" / "2")
    (b / "s" / "2").write_text("changed")
    assert sha256_tree(a) != sha256_tree(b)
    with pytest.raises(NotADirectoryError):
        sha256_tree(a / "s" / "1")


def test_default_cache_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(hashing.CACHE_ENV, raising=False)
    assert default_cache_path() == Path("results/cache/sha256.sqlite")
    monkeypatch.setenv(hashing.CACHE_ENV, str(tmp_path / "x.sqlite"))
    assert default_cache_path() == tmp_path / "x.sqlite"
    assert HashCache().path == tmp_path / "x.sqlite"


def test_wal_mode_and_concurrent_writers(tmp_path: Path) -> None:
    files = []
    for i in range(40):
        f = tmp_path / f"f{i}"
        f.write_bytes(os.urandom(100))
        files.append(f)
    db = tmp_path / "shared.sqlite"
    errors: list[BaseException] = []
    results: list[dict[str, str]] = []

    def worker(k: int) -> None:
        try:
            with HashCache(db, timeout=0.01) as cache:
                for _ in range(3):
                    results.append(cache.sha256_many(files[k::2] + files[:5], threads=2))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k % 2,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    truth = {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    assert all(truth[p] == d for r in results for p, d in r.items())
    import sqlite3

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT COUNT(*) FROM files").fetchone()[0] == 40


def test_unusable_cache_still_hashes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    f = tmp_path / "a"
    f.write_text("a")
    with caplog.at_level(logging.WARNING):
        assert HashCache(blocker / "c.sqlite").sha256(f) == sha256_file(f)
    assert "unusable" in caplog.text


def test_retry_locked_retries_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    monkeypatch.setattr(hashing.time, "sleep", lambda s: None)
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "ok"

    assert hashing._retry_locked(flaky) == "ok"
    assert len(attempts) == 3

    def broken():
        raise sqlite3.OperationalError("no such table: x")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        hashing._retry_locked(broken)


def test_sha256_tree_ignores_snakemake_timestamp(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "w.bin").write_bytes(b"abc")
    before = sha256_tree(d)
    (d / ".snakemake_timestamp").write_bytes(b"")  # Snakemake adds this to directory() outputs
    assert sha256_tree(d) == before
