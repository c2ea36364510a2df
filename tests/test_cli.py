"""Tests for the ``asrflow`` command line (``asrflow verify``)."""

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from asrflow.cli import SUBCOMMANDS, build_parser, main
from asrflow.hashing import HashCache
from asrflow.provenance import build_record, write_record

RECORD = "results/prep/prep.prov.json"
OUTPUTS = ["results/prep/cuts.txt", "results/prep/bpe/model.bin"]


def flip_byte(path: Path, offset: int | None = None) -> None:
    """Flip one bit of one byte in place, restoring the mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()
    Path("data/corpus.tsv").write_text("utt1\thello\n")
    Path("results/prep/bpe").mkdir(parents=True)
    Path("results/prep/cuts.txt").write_text("cut1\n")
    Path("results/prep/bpe/model.bin").write_bytes(os.urandom(32))
    now = datetime.now(UTC)
    record = build_record(
        rule="prep",
        inputs={"corpus": ["data/corpus.tsv"]},
        outputs={"cuts": ["results/prep/cuts.txt"], "bpe": ["results/prep/bpe"]},
        params={"vocab": 100},
        script=None,
        started=now,
        finished=now,
        hash_cache=HashCache("results/cache/sha256.sqlite"),
    )
    write_record(RECORD, record)
    return tmp_path


def test_clean_tree_exits_0(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "results"]) == 0
    out = capsys.readouterr().out
    assert "MISMATCH" not in out
    assert "OK" in out and "1 record(s), 3 file(s) checked" in out


@pytest.mark.parametrize("name", OUTPUTS)
def test_flipped_output_byte_exits_1(ws: Path, name: str, capsys) -> None:
    flip_byte(Path(name))
    assert main(["verify", "results"]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("MISMATCH")]
    assert len(lines) == 1
    shown = name if name.endswith("cuts.txt") else "results/prep/bpe"
    assert shown in lines[0] and RECORD in lines[0] and "modified output" in lines[0]
    assert "FAILED: 1 mismatch(es)" in out


def test_flipped_byte_in_record_exits_1(ws: Path, capsys) -> None:
    flip_byte(Path(RECORD))
    assert main(["verify", RECORD]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCH {RECORD}: " in out
    assert "invalid record" in out or "record modified" in out


def test_missing_output_and_changed_input(ws: Path, capsys) -> None:
    shutil.rmtree("results/prep/bpe")
    Path("data/corpus.tsv").write_text("utt1\thellO\n")
    assert main(["verify", "results/prep/cuts.txt"]) == 1
    out = capsys.readouterr().out
    assert "results/prep/bpe: missing output" in out
    assert "data/corpus.tsv: input changed since the record was made" in out
    assert "FAILED: 2 mismatch(es)" in out


def test_nonexistent_path_exits_1(ws: Path, capsys) -> None:
    assert main(["verify", "no/such/file"]) == 1
    assert "no/such/file: path not found" in capsys.readouterr().out


def test_parser_lists_subcommands(capsys) -> None:
    assert "verify" in SUBCOMMANDS
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "verify" in capsys.readouterr().out


def test_module_entry_point(ws: Path) -> None:
    """``python -m asrflow.cli`` (what the ``asrflow`` console script calls) exits 1 / 0."""
    run = [sys.executable, "-m", "asrflow.cli", "verify", "results"]
    assert subprocess.run(run, capture_output=True, check=False).returncode == 0
    flip_byte(Path("results/prep/cuts.txt"))
    proc = subprocess.run(run, capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "results/prep/cuts.txt" in proc.stdout


@pytest.mark.skipif(
    not (Path(sys.executable).parent / "asrflow").exists(), reason="console script not installed"
)
def test_console_script(ws: Path) -> None:
    exe = str(Path(sys.executable).parent / "asrflow")
    proc = subprocess.run([exe, "verify", "results"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
