"""The work directory resumes only the run it belongs to; a finished run resumed is unchanged."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from asrflow.errors import AsrflowError
from asrflow.train.runner import train_run
from asrflow.train.workdir import IDENTITY, claim_work_dir
from tests.train.tiny_run import make_tiny_run


def test_same_identity_keeps_the_state_other_identity_moves_it_aside(tmp_path):
    work = tmp_path / "work" / "r"
    assert claim_work_dir(work, {"recipe": "a"}) is None
    (work / "checkpoints").mkdir()
    (work / "checkpoints" / "last.ckpt").write_text("state")
    assert claim_work_dir(work, {"recipe": "a"}) is None
    assert (work / "checkpoints" / "last.ckpt").is_file()

    moved = claim_work_dir(work, {"recipe": "b"})
    assert moved is not None and moved.name.startswith("r.stale-")
    assert (moved / "checkpoints" / "last.ckpt").read_text() == "state"  # nothing deleted
    assert sorted(p.name for p in work.iterdir()) == [IDENTITY]
    assert json.loads((work / IDENTITY).read_text()) == {"recipe": "b"}


def test_state_without_an_identity_is_not_resumed(tmp_path):
    work = tmp_path / "r"
    (work / "checkpoints").mkdir(parents=True)
    (work / "checkpoints" / "last.ckpt").write_text("from an older asrflow")
    assert claim_work_dir(work, {"recipe": "a"}) is not None
    assert not (work / "checkpoints").exists()


def test_other_ranks_wait_for_rank_0(tmp_path):
    work = tmp_path / "r"
    with pytest.raises(AsrflowError, match="rank 1 waited"):
        claim_work_dir(work, {"x": 1}, rank=1, timeout=0.2)
    waiter = threading.Thread(target=claim_work_dir, args=(work, {"x": 1}), kwargs={"rank": 1})
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()
    claim_work_dir(work, {"x": 1}, rank=0)
    waiter.join(timeout=5)
    assert not waiter.is_alive()


TWO_CRITERIA = {"best_model_criterion": [["valid/loss", 2, "min"], ["valid/wer", 1, "min"]]}


def test_resuming_a_finished_run_keeps_every_criterion_current(tmp_path):
    """last.ckpt is saved after every top-k callback has seen the validation, so a finished run
    run again (Snakemake reruns it when an input's mtime changed) reports the same checkpoints
    as the first time; a bigger budget trains on; another model starts afresh."""
    spec = make_tiny_run(tmp_path / "data", overrides={**TWO_CRITERIA, "trainer": {"max_steps": 6}})
    first = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    again = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert again["resumed_from"] is not None
    assert again["criteria"] == first["criteria"]
    for info in first["criteria"].values():
        assert (tmp_path / "out" / "checkpoints" / info["best_model_path"]).is_file()

    longer = dataclasses.replace(spec, overrides={**spec.overrides, "trainer": {"max_steps": 8}})
    more = train_run(longer, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert more["resumed_from"] is not None and more["steps"] == 8  # a bigger budget trains on

    other_model = {**spec.overrides, "encoder_conf": {"output_size": 8}}
    changed = dataclasses.replace(spec, overrides=other_model)
    fresh = train_run(changed, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert fresh["resumed_from"] is None and fresh["steps"] == 6
    assert len(list(Path(tmp_path).glob("work.stale-*"))) == 1
