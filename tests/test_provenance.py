"""Tests for asrflow.provenance: building, writing and verifying provenance records."""

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from snakemake.iocontainers import Namedlist

from asrflow import provenance
from asrflow import verify as verify_module
from asrflow.hashing import HashCache, sha256_file, sha256_tree
from asrflow.provenance import (
    SCHEMA,
    build_record,
    code_version,
    library_sha256,
    package_versions,
    to_jsonable,
    write_record,
)
from asrflow.record_paths import old_absolute_paths
from asrflow.verify import (
    CHANGED_INPUT,
    INVALID_RECORD,
    MISSING_INPUT,
    MISSING_OUTPUT,
    MODIFIED_OUTPUT,
    NO_RECORD,
    NOT_FOUND,
    RECORD_MODIFIED,
    verify,
    verify_report,
)

RECORD = "results/step.prov.json"
OUTPUT_FILES = ["results/out.txt", "results/model/w.bin", "results/model/sub/x.txt"]


def flip_byte(path: Path, offset: int | None = None) -> None:
    """Flip one bit of one byte, keeping size, inode and mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns


def make_tree(root: Path) -> dict:
    """A small workflow tree with one record; returns the record as written."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "in.txt").write_text("input text\n")
    (root / "audio").mkdir()
    for name in ("a.wav", "b.wav"):
        (root / "audio" / name).write_bytes(os.urandom(64))
    (root / "results" / "model" / "sub").mkdir(parents=True)
    (root / "results" / "out.txt").write_text("output text\n")
    (root / "results" / "model" / "w.bin").write_bytes(os.urandom(256))
    (root / "results" / "model" / "sub" / "x.txt").write_text("nested\n")
    now = datetime.now(UTC)
    record = build_record(
        rule="toy",
        inputs={"text": ["data/in.txt"]},
        outputs={"out": ["results/out.txt"], "model": ["results/model"]},
        params={"lr": 0.1, "path": Path("a/b")},
        script=None,
        started=now,
        finished=now,
        extra_inputs={"audio": ["audio/a.wav", "audio/b.wav"]},
        hash_cache=HashCache(root / "results" / "cache" / "sha256.sqlite"),
    )
    write_record(RECORD, record)
    return json.loads(Path(RECORD).read_text())


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.chdir(tmp_path)
    return make_tree(tmp_path)


def kinds(mismatches) -> list[tuple[str, str]]:
    return [(m.kind, m.path) for m in mismatches]


def test_record_layout(tree: dict) -> None:
    assert tree["schema"] == SCHEMA
    assert tree["rule"] == "toy"
    assert tree["record_path"] == RECORD
    assert tree["inputs"] == {"text": {"data/in.txt": sha256_file("data/in.txt")}}
    assert tree["outputs"]["model"] == {"results/model": sha256_tree("results/model")}
    assert tree["outputs"]["out"] == {"results/out.txt": sha256_file("results/out.txt")}
    assert set(tree["extra_inputs"]["audio"]) == {"audio/a.wav", "audio/b.wav"}
    assert tree["directories"] == ["results/model"]
    assert tree["trees"] == {
        "results/model": {"w.bin": sha256_file("results/model/w.bin"),
                          "sub/x.txt": sha256_file("results/model/sub/x.txt")}
    }  # fmt: skip
    assert tree["path_base"] == "project"
    assert tree["params"] == {"lr": 0.1, "path": "a/b"}
    assert tree["code"]["script"] is None
    assert len(tree["code"]["library_sha256"]) == 64
    assert tree["packages"]["python"]
    assert set(tree["host"]) == {"hostname", "platform"}
    assert tree["record_sha256"] == provenance.record_digest(tree)


def test_clean_tree_verifies(tree: dict) -> None:
    report = verify_report(["results"])
    assert report.mismatches == []
    assert report.ok
    assert report.records_checked == 1
    assert report.files_checked == 5  # in.txt, 2 audio, out.txt, model/
    assert verify([RECORD]) == []
    assert verify(["results/out.txt"]) == []
    assert verify(["results/model/sub/x.txt"]) == []  # inside a directory output


@pytest.mark.parametrize("name", OUTPUT_FILES)
def test_flipped_output_byte_with_mtime_restored_is_caught(tree: dict, name: str) -> None:
    # Warm the persistent cache first: verify must not trust it.
    HashCache("results/cache/sha256.sqlite").sha256_many(OUTPUT_FILES)
    flip_byte(Path(name))
    found = verify(["results"])
    assert len(found) == 1
    m = found[0]
    assert m.kind == MODIFIED_OUTPUT
    assert m.path == name  # a file in a directory output is named, not only its directory
    assert m.record == RECORD
    assert m.actual == sha256_file(name) and m.expected != m.actual
    if name != "results/out.txt":
        rel = str(Path(name).relative_to("results/model"))
        assert m.expected == tree["trees"]["results/model"][rel]
        assert "in directory results/model" in m.detail
    assert name in str(m) and RECORD in str(m)
    # Found the same way when asked about the file itself.
    assert kinds(verify([name])) == [(MODIFIED_OUTPUT, name)]


def test_files_added_to_or_gone_from_a_directory_output_are_named(tree: dict) -> None:
    Path("results/model/sub/x.txt").unlink()
    Path("results/model/new.txt").write_text("new\n")
    found = {m.path: m for m in verify(["results"])}
    assert set(found) == {"results/model/sub/x.txt", "results/model/new.txt"}
    assert found["results/model/sub/x.txt"].actual is None
    assert "missing" in found["results/model/sub/x.txt"].detail
    assert found["results/model/new.txt"].expected is None
    assert "not in the record" in found["results/model/new.txt"].detail


def test_a_record_without_file_digests_names_the_directory(tree: dict) -> None:
    """A record from before ``trees`` was kept."""
    old = {k: v for k, v in tree.items() if k != "trees"}
    write_record(RECORD, old)
    flip_byte(Path("results/model/w.bin"))
    assert kinds(verify(["results"])) == [(MODIFIED_OUTPUT, "results/model")]


def test_every_single_byte_flip_in_record_is_caught(tree: dict) -> None:
    path = Path(RECORD)
    original = path.read_bytes()
    for offset in range(len(original)):
        flip_byte(path, offset)
        # The record's own checks (what verify runs first) for every byte; full verify for some.
        found = verify_module._load(path).problems if offset % 50 else verify([RECORD])
        assert any(
            m.kind in (INVALID_RECORD, RECORD_MODIFIED) and m.path == RECORD for m in found
        ), f"flip at byte {offset} ({original[offset : offset + 1]!r}) not detected"
        path.write_bytes(original)
    assert verify([RECORD]) == []


def test_reformatted_record_is_caught(tree: dict) -> None:
    Path(RECORD).write_text(json.dumps(tree, indent=4, sort_keys=True))
    assert kinds(verify([RECORD])) == [(RECORD_MODIFIED, RECORD)]


def test_invalid_records(tree: dict) -> None:
    Path("results/bad.prov.json").write_text("{not json")
    Path("results/wrong.prov.json").write_text(json.dumps({"schema": "other/9"}))
    found = verify(["results"])
    assert sorted(kinds(found)) == [
        (INVALID_RECORD, "results/bad.prov.json"),
        (INVALID_RECORD, "results/wrong.prov.json"),
    ]
    assert "schema" in str(next(m for m in found if "wrong" in m.path))


def test_missing_outputs(tree: dict) -> None:
    Path("results/out.txt").unlink()
    shutil.rmtree("results/model")
    found = verify([RECORD])
    assert sorted(kinds(found)) == [
        (MISSING_OUTPUT, "results/model"),
        (MISSING_OUTPUT, "results/out.txt"),
    ]
    assert all(m.actual is None for m in found)


def test_directory_output_replaced_by_file(tree: dict) -> None:
    shutil.rmtree("results/model")
    Path("results/model").write_text("oops")
    assert kinds(verify([RECORD])) == [(MODIFIED_OUTPUT, "results/model")]


def test_extra_file_in_directory_output(tree: dict) -> None:
    Path("results/model/new.bin").write_bytes(b"")
    assert kinds(verify([RECORD])) == [(MODIFIED_OUTPUT, "results/model/new.bin")]


def test_input_changes_are_reported(tree: dict) -> None:
    flip_byte(Path("data/in.txt"))
    flip_byte(Path("audio/b.wav"))
    Path("audio/a.wav").unlink()
    found = verify([RECORD])
    assert sorted(kinds(found)) == sorted(
        [
            (MISSING_INPUT, "audio/a.wav"),
            (CHANGED_INPUT, "audio/b.wav"),
            (CHANGED_INPUT, "data/in.txt"),
        ]
    )
    by_path = {m.path: m for m in found}
    assert "extra input 'audio'" in by_path["audio/b.wav"].detail
    assert "input 'text'" in by_path["data/in.txt"].detail
    assert "input changed since the record was made" in str(by_path["data/in.txt"])


def test_files_without_records_and_missing_paths(tree: dict) -> None:
    Path("data/other.txt").write_text("x")
    Path("empty").mkdir()
    found = verify(["data/other.txt", "empty", "nope.txt"])
    assert kinds(found) == [
        (NO_RECORD, "data/other.txt"),
        (NO_RECORD, "empty"),
        (NOT_FOUND, "nope.txt"),
    ]


def test_record_found_from_parent_directory(tree: dict) -> None:
    # A record one level up lists a file in a subdirectory.
    assert [str(p) for p in verify_module._candidate_records(Path("results/model/w.bin"))] == [
        str(Path.cwd() / RECORD)
    ]


def test_moved_workflow_still_verifies(tree: dict, tmp_path: Path, monkeypatch) -> None:
    moved = tmp_path.parent / (tmp_path.name + "_moved")
    shutil.copytree(tmp_path, moved)
    try:
        monkeypatch.chdir("/")
        assert verify([moved / "results"]) == []
        flip_byte(moved / "results" / "out.txt")
        assert [m.kind for m in verify([moved / RECORD])] == [MODIFIED_OUTPUT]
    finally:
        shutil.rmtree(moved)


def absolute_audio_record(root: Path) -> None:
    """Rewrite the tree's record as an import writes it: its audio named by absolute paths."""
    now = datetime.now(UTC)
    record = build_record(
        rule="toy", inputs={"text": ["data/in.txt"]}, outputs={"out": ["results/out.txt"]},
        params={}, script=None, started=now, finished=now, hash_cache=None,
        extra_inputs={"audio": [str(root / "audio/a.wav"), str(root / "audio/b.wav")]},
    )  # fmt: skip
    write_record(str(root / RECORD), record)


def test_paths_inside_the_project_are_stored_relative(tree: dict, tmp_path: Path) -> None:
    absolute_audio_record(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}_outside.wav"
    outside.write_bytes(b"x")
    try:
        now = datetime.now(UTC)
        record = build_record(
            rule="r", inputs={"x": [str(outside)]}, outputs={}, params={}, script=None,
            started=now, finished=now, hash_cache=None,
        )  # fmt: skip
        assert record["inputs"] == {"x": {str(outside): sha256_file(outside)}}  # kept absolute
    finally:
        outside.unlink()
    written = json.loads(Path(RECORD).read_text())
    assert written["record_path"] == RECORD
    assert sorted(written["extra_inputs"]["audio"]) == ["audio/a.wav", "audio/b.wav"]


def test_a_moved_project_checks_its_own_audio(tree: dict, tmp_path: Path, monkeypatch) -> None:
    """Issue 30: a copy's record pointed at the audio in the old location, unchanged there."""
    absolute_audio_record(tmp_path)
    moved = tmp_path.parent / (tmp_path.name + "_moved")
    shutil.copytree(tmp_path, moved)
    try:
        monkeypatch.chdir(moved)
        assert verify(["results"]) == []
        flip_byte(moved / "audio/a.wav")
        assert kinds(verify(["results"])) == [(CHANGED_INPUT, "audio/a.wav")]
    finally:
        shutil.rmtree(moved)


def test_an_old_record_with_absolute_paths_is_read_as_such_and_reported_once(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """A record from before paths were stored relative, in a copy of the project: its audio
    path names the old location, which is checked (unchanged there), with one warning."""
    old_root, copy = tmp_path / "old", tmp_path / "copy"
    for root in (old_root, copy):
        (root / "results/corpora/audio").mkdir(parents=True)
        (root / "results/corpora/audio/a.wav").write_bytes(b"RIFF")
        (root / "results/cuts.txt").write_text("cuts\n")
    monkeypatch.chdir(copy)
    audio = str(old_root / "results/corpora/audio/a.wav")
    now = datetime.now(UTC)
    record = build_record(
        rule="import_manifest", inputs={}, outputs={"cuts": ["results/cuts.txt"]}, params={},
        script=None, started=now, finished=now, hash_cache=None, extra_inputs={"audio": [audio]},
    )  # fmt: skip
    record["extra_inputs"]["audio"] = {audio: sha256_file(audio)}
    del record["path_base"]
    write_record("results/cuts.txt.prov.json", record)
    (copy / "results/corpora/audio/a.wav").write_bytes(b"RIFX")  # not seen: read as listed
    with caplog.at_level("WARNING"):
        assert verify(["results"]) == [] and verify(["results"]) == []
    warned = [r.getMessage() for r in caplog.records if "absolute path" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "results/cuts.txt.prov.json" in warned[0] and audio in warned[0]
    assert "rerun rule import_manifest" in warned[0]
    # the same record written now lists the project's audio relative: no warning
    record["path_base"] = "project"
    assert old_absolute_paths(record, copy) == []


def test_build_record_rejects_missing_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    now = datetime.now(UTC)
    with pytest.raises(FileNotFoundError, match=r"nothere\.txt"):
        build_record(
            rule="r", inputs={"x": ["nothere.txt"]}, outputs={}, params={}, script=None,
            started=now, finished=now, hash_cache=None,
        )  # fmt: skip


def test_build_record_without_cache_and_with_script(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.py").write_text("print('hi')\n")
    Path("o").write_text("o")
    now = datetime.now(UTC)
    rec = build_record(
        rule="r", inputs={}, outputs={"o": ["o"]}, params=None, script="s.py",
        started=now, finished=now, hash_cache=None,
    )  # fmt: skip
    assert rec["outputs"] == {"o": {"o": sha256_file("o")}}
    assert rec["code"]["script"] == {"path": "s.py", "sha256": sha256_file("s.py")}
    assert rec["code"]["git"]["commit"] is None or isinstance(rec["code"]["git"]["commit"], str)


def test_to_jsonable_snakemake_params() -> None:
    nl = Namedlist(fromdict={"a": Path("x/y"), "b": np.float32(0.5), "c": {"k": (1, 2)}})
    nl.append("positional")
    assert to_jsonable(nl) == {"a": "x/y", "b": 0.5, "c": {"k": [1, 2]}, "_unnamed": ["positional"]}
    assert to_jsonable(Namedlist(["p", "q"])) == ["p", "q"]
    assert to_jsonable({"n": float("nan"), "s": {3, 1}, "arr": np.arange(3)}) == {
        "n": "nan", "s": [1, 3], "arr": [0, 1, 2],
    }  # fmt: skip
    assert to_jsonable(len) == "<callable len>"
    json.dumps(to_jsonable({"x": object()}))  # anything else becomes a string


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd, check=True, capture_output=True,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_code_version(tmp_path: Path) -> None:
    assert code_version(tmp_path) == {"commit": None, "dirty": None}
    _git(tmp_path, "init", "-q")
    (tmp_path / "Snakefile").write_text("rule all:\n")
    _git(tmp_path, "add", "Snakefile")
    _git(tmp_path, "commit", "-q", "-m", "init")
    v = code_version(tmp_path)
    assert len(v["commit"]) == 40 and v["dirty"] is False
    for ignored in ("results", "logs", ".snakemake"):
        (tmp_path / ignored).mkdir()
        (tmp_path / ignored / "f").write_text("x")
    assert code_version(tmp_path)["dirty"] is False
    (tmp_path / "new.py").write_text("x")
    assert code_version(tmp_path)["dirty"] is True
    (tmp_path / "new.py").unlink()
    (tmp_path / "Snakefile").write_text("changed\n")
    assert code_version(tmp_path)["dirty"] is True


def test_library_and_package_versions() -> None:
    assert len(library_sha256()) == 64
    versions = package_versions()
    assert set(versions) >= {"python", "torch", "espnet", "lhotse", "snakemake", "numpy"}
    assert versions["snakemake"] is not None
    versions["python"] = "mutated"
    assert package_versions()["python"] != "mutated"


def test_slurm_job_is_read_from_the_environment_only_inside_a_job() -> None:
    assert provenance.slurm_job({"CUDA_VISIBLE_DEVICES": "0", "SLURM_CONF": "/x"}) is None
    env = {
        "SLURM_JOB_ID": "17",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_NODELIST": "node[01-02]",
        "SLURM_GPUS": "a100:1",
        "SLURM_GPUS_ON_NODE": "1",
        "CUDA_VISIBLE_DEVICES": "0",
        "HOME": "/root",
    }
    assert provenance.slurm_job(env) == {
        "job_id": "17",
        "array_task_id": "3",
        "step_id": "0",
        "partition": "gpu",
        "nodelist": "node[01-02]",
        "gpus": "a100:1",
        "gpus_on_node": "1",
        "cuda_visible_devices": "0",
    }


def test_record_names_the_slurm_job_it_ran_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("in.txt").write_text("x\n")
    now = datetime.now(UTC)
    kwargs = dict(
        rule="toy", inputs={"i": ["in.txt"]}, outputs={}, params={}, script=None,
        started=now, finished=now, hash_cache=None,
    )  # fmt: skip
    for var in list(os.environ):
        if var.startswith("SLURM_"):
            monkeypatch.delenv(var)
    assert "slurm" not in build_record(**kwargs)["host"]
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "debug")
    record = build_record(**kwargs)
    assert record["host"]["slurm"] == {"job_id": "123", "partition": "debug"}
    write_record("in.txt.prov.json", record)
    assert verify(["in.txt.prov.json"]) == []
