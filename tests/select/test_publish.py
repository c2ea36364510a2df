"""Tests for asrflow.select.publish: the copy of a run's chosen package its children start from."""

import json

import pytest

from asrflow.errors import AsrflowError
from asrflow.export.find import PACKAGE_FILES
from asrflow.select.publish import publish_selected


def _package(root, name, weights=b"w"):
    package = root / "exports" / name
    package.mkdir(parents=True)
    for file in PACKAGE_FILES:
        (package / file).write_bytes(weights if file == "model.pth" else file.encode())
    return package


def _selected(root, choice):
    path = root / "selected.json"
    path.write_text(json.dumps({"selected": choice}))
    return path


def test_copies_the_chosen_package_as_plain_files(tmp_path):
    best = _package(tmp_path, "valid.wer.best", b"best")
    avg = _package(tmp_path, "valid.wer.ave_3best", b"avg")
    out = tmp_path / "selected"
    source = publish_selected(_selected(tmp_path, "valid.wer.ave_3best"), [best, avg], out)
    assert source == avg
    assert sorted(p.name for p in out.iterdir()) == sorted(PACKAGE_FILES)
    assert (out / "model.pth").read_bytes() == b"avg"
    # a republish of the same choice writes the same bytes (what keeps the children from rerunning)
    publish_selected(_selected(tmp_path, "valid.wer.ave_3best"), [best, avg], out)
    assert (out / "model.pth").read_bytes() == b"avg"


def test_a_choice_that_is_not_exported_says_to_rerun_the_selection(tmp_path):
    best = _package(tmp_path, "valid.wer.best")
    with pytest.raises(AsrflowError, match=r"selects 'gone', .*\(valid\.wer\.best\); rerun select"):
        publish_selected(_selected(tmp_path, "gone"), [best], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_package_missing_a_file_names_it_and_writes_nothing_half(tmp_path):
    best = _package(tmp_path, "valid.wer.best")
    (best / "tokens.txt").unlink()
    with pytest.raises(AsrflowError, match=r"valid\.wer\.best: has no tokens\.txt; re-export"):
        publish_selected(_selected(tmp_path, "valid.wer.best"), [best], tmp_path / "out")
    assert not (tmp_path / "out" / "tokens.txt").exists()
