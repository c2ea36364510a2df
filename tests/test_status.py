"""asrflow status: what differs between the results and the checkout, per artifact."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from asrflow.cli import main
from asrflow.hashing import HashCache
from asrflow.provenance import build_record, module_digests, write_record
from asrflow.status import changed_code, format_status, status_json, workflow_status


def _artifact(root: Path, modules: dict[str, str] | None = None) -> tuple[Path, Path, Path]:
    """An input, an output and the record of the step that made one from the other."""
    results = root / "results"
    results.mkdir(parents=True)
    src, out = root / "in.txt", results / "out.txt"
    src.write_text("input")
    out.write_text("output")
    now = datetime.now(UTC)
    record = build_record(
        rule="make",
        inputs={"src": [str(src)]},
        outputs={"out": [str(out)]},
        params={},
        script=None,
        started=now,
        finished=now,
        hash_cache=None,
        modules=modules if modules is not None else module_digests(["asrflow.text"]),
    )
    path = results / "out.txt.prov.json"
    write_record(path, record)
    return src, out, path


def _status(root: Path):
    return workflow_status(root / "results", cache=HashCache(root / "cache.sqlite"))


def test_a_fresh_artifact_is_up_to_date(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _artifact(tmp_path)
    statuses = _status(tmp_path)
    assert [s.up_to_date for s in statuses] == [True]
    assert format_status(statuses) == "up to date (1 artifact(s) checked)"
    assert status_json(statuses)["up_to_date"] is True


def test_changed_inputs_outputs_code_and_packages_are_each_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stale = {"asrflow.text": "0" * 64, "asrflow.gone_module": "1" * 64}
    src, out, record = _artifact(tmp_path, modules=stale)
    data = json.loads(record.read_text())
    data["packages"]["torch"] = "0.0.1"
    write_record(record, data)
    src.write_text("another input")
    out.write_text("edited by hand")
    (status,) = _status(tmp_path)
    found = {(d.kind, d.what) for d in status.differences}
    assert ("inputs", "in.txt") in found  # as listed: relative to the project
    assert ("outputs", "results/out.txt") in found
    assert ("code", "asrflow.text") in found
    assert ("code", "asrflow.gone_module") in found  # a module that no longer exists changed too
    assert ("packages", "torch") in found
    text = format_status([status])
    assert text.startswith("make: ") and "code: asrflow.text" in text
    assert "1 of 1 artifact(s) differ" in text


def test_a_copied_project_compares_its_own_files(tmp_path, monkeypatch):
    """Issue 30: the record named the files by their absolute path, in the old location."""
    import shutil

    old, copy = tmp_path / "old", tmp_path / "copy"
    monkeypatch.chdir(old.mkdir() or old)
    _artifact(old)
    shutil.copytree(old, copy)
    monkeypatch.chdir(copy)
    assert [s.up_to_date for s in _status(copy)] == [True]
    (copy / "in.txt").write_text("changed in the copy")
    (status,) = _status(copy)
    assert [(d.kind, d.what) for d in status.differences] == [("inputs", "in.txt")]


def test_changed_code_compares_modules_and_script(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print(1)")
    from asrflow.hashing import sha256_file

    record = {
        "code": {
            "modules": module_digests(["asrflow.text", "asrflow.io"]),
            "script": {"path": str(script), "sha256": sha256_file(script)},
        }
    }
    assert changed_code(record) == []
    script.write_text("print(2)")
    record["code"]["modules"]["asrflow.io"] = "f" * 64
    assert changed_code(record) == ["asrflow.io", str(script)]
    assert changed_code({"code": {}}) == []  # a record from before module digests


def test_cli_exit_code_says_whether_anything_differs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASRFLOW_HASH_CACHE", str(tmp_path / "cache.sqlite"))
    src, _, _ = _artifact(tmp_path)
    assert main(["status", "--no-params"]) == 0
    assert "up to date" in capsys.readouterr().out
    src.write_text("changed")
    assert main(["status", "--no-params", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["up_to_date"] is False
    assert report["artifacts"][0]["differences"][0]["kind"] == "inputs"
