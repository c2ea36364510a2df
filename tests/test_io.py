"""Tests for asrflow.io: atomic, content-stable writes and byte-reproducible jsonl.gz."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from asrflow import io as aio
from asrflow.io import (
    atomic_output,
    build_dir_once,
    dumps_json,
    write_bytes,
    write_json,
    write_jsonl_gz,
    write_text,
)

OLD_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09, far from "now"

RECORDS = [
    {"id": "b", "text": "hola qué tal", "n": 1, "nested": {"z": 1, "a": [1, 2]}},
    {"id": "a", "text": "", "n": 2.5, "flag": None},
]


def siblings(path: Path) -> list[str]:
    """Every entry of the target's directory (temp files start with '.<name>.')."""
    return sorted(p.name for p in path.parent.iterdir())


def age(path: Path) -> None:
    os.utime(path, ns=(OLD_NS, OLD_NS))
    assert path.stat().st_mtime_ns == OLD_NS


# --- atomic_output ---------------------------------------------------------------------------


def test_success_moves_temp_into_place_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "dir" / "x.jsonl.gz"  # parents are created
    with atomic_output(target) as tmp:
        assert tmp.parent == target.parent
        assert tmp != target
        assert tmp.name.startswith(".x.jsonl.gz.")
        assert tmp.name.endswith(".jsonl.gz")  # libraries that sniff the suffix still work
        assert not target.exists()  # nothing visible before the block ends
        tmp.write_bytes(b"payload")
    assert target.read_bytes() == b"payload"
    assert siblings(target) == ["x.jsonl.gz"]


def test_suffix_argument_and_default_for_suffixless_target(tmp_path: Path) -> None:
    with atomic_output(tmp_path / "noext") as tmp:
        assert tmp.name.endswith(".tmp")
        tmp.write_text("a")
    with atomic_output(tmp_path / "y.bin", suffix=".wav") as tmp:
        assert tmp.name.endswith(".wav")
        tmp.write_text("b")
    assert siblings(tmp_path / "noext") == ["noext", "y.bin"]


def test_exception_removes_temp_and_keeps_old_target(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_bytes(b"old")
    age(target)
    with pytest.raises(RuntimeError, match="boom"), atomic_output(target) as tmp:
        tmp.write_bytes(b"new, half written")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert target.stat().st_mtime_ns == OLD_NS
    assert siblings(target) == ["x.json"]


def test_exception_without_old_target_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    with pytest.raises(KeyError), atomic_output(target) as tmp:
        tmp.write_bytes(b"partial")
        raise KeyError("x")
    assert siblings(target) == []


def test_exception_before_writing_anything(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    with pytest.raises(ValueError), atomic_output(target) as tmp:
        tmp.unlink()  # a library that removes its output on failure
        raise ValueError
    assert siblings(target) == []


def test_identical_content_keeps_mtime(tmp_path: Path) -> None:
    target = tmp_path / "x.bin"
    write_bytes(target, b"same bytes")
    age(target)
    inode = target.stat().st_ino
    write_bytes(target, b"same bytes")
    assert target.stat().st_mtime_ns == OLD_NS
    assert target.stat().st_ino == inode  # not even replaced by an equal copy
    assert siblings(target) == ["x.bin"]


def test_different_content_replaces(tmp_path: Path) -> None:
    target = tmp_path / "x.bin"
    write_bytes(target, b"first")
    age(target)
    write_bytes(target, b"second")
    assert target.read_bytes() == b"second"
    assert target.stat().st_mtime_ns != OLD_NS
    assert siblings(target) == ["x.bin"]


def test_same_size_same_mtime_different_content_replaces(tmp_path: Path) -> None:
    """The comparison reads the bytes: a size/mtime (shallow) check would keep the old file."""
    target = tmp_path / "x.bin"
    write_bytes(target, b"aaaa")
    age(target)
    with atomic_output(target) as tmp:
        tmp.write_bytes(b"bbbb")
        os.utime(tmp, ns=(OLD_NS, OLD_NS))  # same size, same mtime as the target
    assert target.read_bytes() == b"bbbb"


def test_commit_return_value(tmp_path: Path) -> None:
    target = tmp_path / "x"
    tmp = tmp_path / "t1"
    tmp.write_bytes(b"v")
    assert aio.commit(tmp, target) is True
    assert not tmp.exists()
    tmp.write_bytes(b"v")
    assert aio.commit(tmp, target) is False
    assert not tmp.exists()
    tmp.write_bytes(b"w")
    assert aio.commit(tmp, target) is True
    assert target.read_bytes() == b"w"


def test_written_file_is_world_readable(tmp_path: Path) -> None:
    """mkstemp creates 0600 files; committed artifacts must be readable like normal files."""
    target = tmp_path / "x.txt"
    write_text(target, "hi")
    assert target.stat().st_mode & 0o777 == 0o644


def test_write_text_is_utf8(tmp_path: Path) -> None:
    target = tmp_path / "x.txt"
    write_text(target, "señor ’n’ 日本")
    assert target.read_bytes() == "señor ’n’ 日本".encode()


# --- JSON ------------------------------------------------------------------------------------


def test_write_json_is_stable_and_sorted(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(a, {"z": 1, "a": {"y": [3, 1], "b": "é"}, "m": None})
    write_json(b, {"m": None, "a": {"b": "é", "y": [3, 1]}, "z": 1})
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text(encoding="utf-8")
    assert text == '{\n  "a": {\n    "b": "é",\n    "y": [\n      3,\n      1\n    ]\n  },\n' + (
        '  "m": null,\n  "z": 1\n}\n'
    )
    assert json.loads(text) == {"z": 1, "a": {"y": [3, 1], "b": "é"}, "m": None}


def test_write_json_rewrite_of_equal_object_keeps_mtime(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_json(target, {"b": 1, "a": 2})
    age(target)
    write_json(target, {"a": 2, "b": 1})
    assert target.stat().st_mtime_ns == OLD_NS


def test_dumps_json_falls_back_to_str(tmp_path: Path) -> None:
    assert dumps_json({"p": Path("x/y")}) == '{\n  "p": "x/y"\n}\n'


# --- jsonl.gz --------------------------------------------------------------------------------


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_write_jsonl_gz_roundtrip_and_count(tmp_path: Path) -> None:
    target = tmp_path / "cuts.jsonl.gz"
    assert write_jsonl_gz(target, iter(RECORDS)) == 2  # any iterable, generators included
    assert read_jsonl_gz(target) == RECORDS
    raw = gzip.decompress(target.read_bytes()).decode("utf-8")
    assert raw.endswith("\n")
    assert raw.count("\n") == 2
    assert "qué" in raw  # not \u-escaped
    assert siblings(target) == ["cuts.jsonl.gz"]


def test_write_jsonl_gz_empty(tmp_path: Path) -> None:
    target = tmp_path / "empty.jsonl.gz"
    assert write_jsonl_gz(target, []) == 0
    assert read_jsonl_gz(target) == []


def test_write_jsonl_gz_is_byte_identical_across_writes_and_names(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "other" / "b.jsonl.gz"
    write_jsonl_gz(a, RECORDS)
    write_jsonl_gz(b, RECORDS)
    assert a.read_bytes() == b.read_bytes()
    header = a.read_bytes()[:10]
    assert header[:2] == b"\x1f\x8b"
    assert header[4:8] == b"\x00\x00\x00\x00"  # MTIME 0
    assert header[3] & 0x08 == 0  # no FNAME (the temp file's name would leak in)


def test_write_jsonl_gz_is_independent_of_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    monkeypatch.setattr(time, "time", lambda: 1_000_000.0)
    write_jsonl_gz(a, RECORDS)
    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.0)
    write_jsonl_gz(b, RECORDS)
    assert a.read_bytes() == b.read_bytes()


def test_write_jsonl_gz_rerun_keeps_mtime_and_change_replaces(tmp_path: Path) -> None:
    target = tmp_path / "c.jsonl.gz"
    write_jsonl_gz(target, RECORDS)
    age(target)
    write_jsonl_gz(target, RECORDS)
    assert target.stat().st_mtime_ns == OLD_NS
    write_jsonl_gz(target, RECORDS[:1])
    assert target.stat().st_mtime_ns != OLD_NS
    assert read_jsonl_gz(target) == RECORDS[:1]


def test_write_jsonl_gz_failure_midway_keeps_old_file(tmp_path: Path) -> None:
    target = tmp_path / "c.jsonl.gz"
    write_jsonl_gz(target, RECORDS)
    before = target.read_bytes()

    def records():
        yield RECORDS[0]
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        write_jsonl_gz(target, records())
    assert target.read_bytes() == before
    assert siblings(target) == ["c.jsonl.gz"]


def test_write_jsonl_gz_unserializable_record_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "c.jsonl.gz"
    with pytest.raises(TypeError):
        write_jsonl_gz(target, [{"x": object()}])
    assert siblings(target) == []


# --- a disk that fills ----------------------------------------------------------------------------

_LIMITED = """
import resource, signal, sys
{setup}
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, write() fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
{code}
except Exception as exc:
    print(f"{{type(exc).__name__}}: {{exc}}", file=sys.stderr)
    sys.exit(3)
"""


def run_with_file_size_limit(
    code: str, limit: int, cwd: Path, setup: str = "", timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python whose files may not grow past ``limit`` bytes (a disk that
    fills, simulated with RLIMIT_FSIZE; ``setup`` runs before the limit is set). An exception
    exits with status 3 and ``<type>: <message>`` as the last line of stderr."""
    body = textwrap.indent(textwrap.dedent(code).strip(), "    ")
    script = _LIMITED.format(setup=textwrap.dedent(setup).strip(), limit=limit, code=body)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("writer", ["write_bytes", "write_jsonl_gz", "atomic_output"])
def test_a_full_disk_raises_write_failed_and_keeps_the_old_file(tmp_path: Path, writer) -> None:
    target = tmp_path / "x.jsonl.gz"
    target.write_bytes(b"old content")
    age(target)
    code = {
        "write_bytes": "aio.write_bytes(target, b'x' * 100_000)",
        "write_jsonl_gz": "aio.write_jsonl_gz(target, ({'i': i, 'r': random.random()} "
        "for i in range(20_000)))",
        "atomic_output": "with aio.atomic_output(target) as tmp, open(tmp, 'wb') as f:\n"
        "    f.write(b'x' * 100_000)",
    }[writer]
    proc = run_with_file_size_limit(
        code,
        limit=4096,
        cwd=tmp_path,
        setup=f"import random\nfrom pathlib import Path\nimport asrflow.io as aio\n"
        f"target = Path({str(target)!r})",
    )
    assert proc.returncode == 3, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"WriteFailed: {target}: could not be written whole (")
    )
    assert f"Nothing half-written was kept: {target} keeps its previous content" in proc.stderr
    assert f"Free space on the filesystem of {tmp_path} and rerun" in proc.stderr
    assert target.read_bytes() == b"old content" and target.stat().st_mtime_ns == OLD_NS
    assert siblings(target) == ["x.jsonl.gz"]  # no temporary file left behind


def test_a_full_disk_before_the_first_write_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "new.bin"
    proc = run_with_file_size_limit(
        "aio.write_text(target, 'y' * 10_000)",
        limit=1000,
        cwd=tmp_path,
        setup=f"from pathlib import Path\nimport asrflow.io as aio\ntarget = Path({str(target)!r})",
    )
    assert proc.returncode == 3, proc.stderr
    assert f"{target} was not created" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_write_failure_is_recognised_through_torch_and_errno() -> None:
    import errno

    assert aio.is_write_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert aio.is_write_failure(OSError(errno.EFBIG, "File too large"))
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704")
    assert aio.is_write_failure(torch_error)
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert aio.is_write_failure(wrapped)
    assert not aio.is_write_failure(OSError(errno.EACCES, "Permission denied"))
    assert not aio.is_write_failure(RuntimeError("CUDA out of memory"))


def test_a_directory_is_built_once_per_record_and_a_failed_build_leaves_the_old_one(tmp_path):
    out = tmp_path / "built"
    calls = []

    def write(tmp):
        calls.append(tmp)
        (tmp / "a.txt").write_text(str(len(calls)))

    assert build_dir_once(out, {"seed": 1, "range": (1, 2)}, write)
    assert (out / "a.txt").read_text() == "1"
    assert json.loads((out / "settings.json").read_text()) == {"seed": 1, "range": [1, 2]}
    assert out.stat().st_mode & 0o777 == 0o755
    assert not build_dir_once(out, {"seed": 1, "range": (1, 2)}, write)  # tuples read as lists
    assert len(calls) == 1
    assert build_dir_once(out, {"seed": 2, "range": (1, 2)}, write)
    assert (out / "a.txt").read_text() == "2"

    def fail(tmp):
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        build_dir_once(out, {"seed": 3}, fail)
    assert (out / "a.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["built"]  # no temporary left behind
