"""The work directory resumes only the run it belongs to; a finished run resumed is unchanged."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from asrflow.errors import AsrflowError
from asrflow.recipe.sections import OPERATIONAL_KEYS
from asrflow.train.run.runner import train_run
from asrflow.train.run.workdir import IDENTITY, claim_work_dir
from tests.train.tiny_run import TINY_RECIPE, make_tiny_run, with_overrides


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
    run again reports the same checkpoints as the first time; another model starts afresh."""
    spec = make_tiny_run(tmp_path / "data", overrides={**TWO_CRITERIA, "trainer": {"max_steps": 6}})
    first = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    again = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert again["resumed_from"] is not None
    assert again["criteria"] == first["criteria"]
    for info in first["criteria"].values():
        assert (tmp_path / "out" / "checkpoints" / info["best_model_path"]).is_file()

    other_model = {"encoder_conf": {"output_size": 8}}
    changed = with_overrides(spec, other_model)
    fresh = train_run(changed, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    assert fresh["resumed_from"] is None and fresh["steps"] == 6
    assert len(list(Path(tmp_path).glob("work.stale-*"))) == 1


def _train(spec, root, **overrides):
    spec = with_overrides(spec, overrides)
    return train_run(spec, root / "work", root / "out", root / "summary.json")


def test_a_changed_recipe_never_resumes_weights_trained_under_the_old_one(tmp_path, caplog):
    """Issue 11: a finished run whose lr (or max_steps) changed trained 0 steps and wrote the new
    recipe's hash over the old weights. Every setting that can change the weights is part of the
    work directory's identity: the run starts fresh, and the log names the changed keys."""
    spec = make_tiny_run(tmp_path / "data")
    first = _train(spec, tmp_path)
    assert first["steps"] == 4 and first["resumed_from"] is None

    lr = {"optim": {"name": "adamw", "lr": 0.001}}
    with caplog.at_level("WARNING", logger="asrflow.train.run.workdir"):
        second = _train(spec, tmp_path, **lr)
    assert second["resumed_from"] is None and second["steps"] == 4  # trained anew, all 4 steps
    assert "recipe optim.lr: 0.002 -> 0.001" in caplog.text
    assert second["hashes"]["recipe"] != first["hashes"]["recipe"]
    assert second["recipe_settings"]["optim"]["lr"] == 0.001
    assert second["final_metrics"] != first["final_metrics"]  # other weights, other figures

    longer = {**lr, "trainer": {**TINY_RECIPE["trainer"], "max_steps": 6}}
    third = _train(spec, tmp_path, **longer)  # the cosine total changes: another run
    assert third["resumed_from"] is None and third["steps"] == 6
    assert len(list(tmp_path.glob("work.stale-*"))) == 2


def test_operational_recipe_keys_resume_and_keep_the_recipe_hash(tmp_path):
    """Loader workers and diagnostics cannot change the weights: a run whose only change is
    one of OPERATIONAL_KEYS resumes (a finished one trains 0 steps) and its recipe hash stays."""
    spec = make_tiny_run(tmp_path / "data")
    first = _train(spec, tmp_path)
    batching = {**TINY_RECIPE["batching"], "num_workers": 1}
    diagnostics = {"num_decode_utterances": 1, "spike_window": 7}
    again = _train(spec, tmp_path, batching=batching, diagnostics=diagnostics)
    assert again["resumed_from"] is not None and again["steps"] == 4
    assert again["hashes"]["recipe"] == first["hashes"]["recipe"]
    assert not list(tmp_path.glob("work.stale-*"))
    assert {k.split(".")[0] for k in OPERATIONAL_KEYS} == {"batching", "diagnostics"}


def test_the_identity_covers_the_corpus_weights_and_every_weight_changing_recipe_key():
    from asrflow.recipe.checks import recipe_from_dict
    from asrflow.train.run.workdir import run_identity

    recipe = recipe_from_dict(TINY_RECIPE)
    hashes = {"train_cuts": {"a": "1"}, "dev_cuts": "2"}
    same = run_identity(hashes, recipe, None, [1.0, 3.0])
    assert same == run_identity(hashes, recipe, None, [1.0, 3.0])
    assert same != run_identity(hashes, recipe, None, [1.0, 1.0])
    assert same != run_identity(hashes, recipe, None, None)
    seeded = recipe_from_dict({**TINY_RECIPE, "trainer": {**TINY_RECIPE["trainer"], "seed": 1}})
    assert same != run_identity(hashes, seeded, None, [1.0, 3.0])


def test_a_sharded_run_is_another_run_with_other_loader_workers_or_shard_size(tmp_path, caplog):
    """On shards each loader worker batches its own share (asrflow.train.batches.shard_stream), and
    the shard size groups the cuts: either changes the batches, so either starts the run anew under
    another identity (before, both resumed and the summary claimed the new setting for weights
    trained under the old). Rewriting the shards as wav (the same samples) and an operational
    key that stays one (diagnostics) resume."""
    from asrflow.data.shards import ShardSettings, write_shards

    spec = make_tiny_run(tmp_path / "data")
    shards = tmp_path / "shards"
    write_shards(spec.train_cuts[0], shards, ShardSettings(shard_size=3))
    spec = dataclasses.replace(spec, train_shards=[str(shards)])
    first = _train(spec, tmp_path)
    assert first["recipe_settings"]["batching"]["num_workers"] == 0

    write_shards(spec.train_cuts[0], shards, ShardSettings(shard_size=3, audio_format="wav"))
    again = _train(spec, tmp_path, diagnostics={"num_decode_utterances": 1})
    assert (
        again["resumed_from"] is not None and again["hashes"]["recipe"] == first["hashes"]["recipe"]
    )
    assert not list(tmp_path.glob("work.stale-*"))

    two = {"batching": {**TINY_RECIPE["batching"], "num_workers": 2}}
    with caplog.at_level("WARNING", logger="asrflow.train.run.workdir"):
        workers = _train(spec, tmp_path, **two)
    assert workers["resumed_from"] is None and workers["steps"] == 4
    assert "recipe batching.num_workers: 0 -> 2" in caplog.text
    assert workers["hashes"]["recipe"] != first["hashes"]["recipe"]
    assert workers["recipe_settings"]["batching"]["num_workers"] == 2
    assert workers["final_metrics"] != first["final_metrics"]  # other batches, other weights

    write_shards(spec.train_cuts[0], shards, ShardSettings(shard_size=2))
    with caplog.at_level("WARNING", logger="asrflow.train.run.workdir"):
        resized = _train(spec, tmp_path, **two)
    assert resized["resumed_from"] is None and "shard_sizes" in caplog.text
    assert len(list(tmp_path.glob("work.stale-*"))) == 2
