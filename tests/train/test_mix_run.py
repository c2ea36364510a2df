"""A run on two corpora mixed by weights trains on each epoch's weighted mix (runs.<run>.weights).

Measured before :class:`~asrflow.train.batches.loader.EpochMixSampler`: the mix was read once into
an eager CutSet that the bucketing sampler shuffled, so every epoch held every cut once and the
weights changed nothing but an order the shuffle then discarded.
"""

from __future__ import annotations

import collections
import dataclasses

from asrflow.data.cuts import load_cuts, save_cuts
from asrflow.train.batches.loader import mix_epoch
from asrflow.train.loop.module import AsrModule
from asrflow.train.run.runner import train_run
from tests.train.tiny_run import make_tiny_run, with_overrides

WEIGHTS = [1.0, 3.0]


def _two_corpora(root):
    """The tiny run on two corpora: its train split and the same audio under ``new-`` IDs."""
    spec = make_tiny_run(root)
    new = root / "new.jsonl.gz"
    save_cuts(load_cuts(spec.train_cuts[0]).modify_ids(lambda i: f"new-{i}"), new)
    return dataclasses.replace(spec, train_cuts=[spec.train_cuts[0], str(new)])


def train_recording_epochs(spec, tmp_path, monkeypatch) -> tuple[dict, dict[int, list[str]]]:
    """Train ``spec`` under ``tmp_path``; its summary and the cut IDs trained on, per epoch."""
    trained: dict[int, list[str]] = collections.defaultdict(list)
    step_fn = AsrModule.training_step

    def recording_step(self, batch, batch_idx):
        trained[self.current_epoch].extend(batch["ids"])
        return step_fn(self, batch, batch_idx)

    monkeypatch.setattr(AsrModule, "training_step", recording_step)
    summary = train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    return summary, trained


def test_weighted_corpora_give_each_epoch_the_weights_share(tmp_path, monkeypatch):
    spec = _two_corpora(tmp_path / "data")
    corpora = spec.train_cuts
    steps = 30  # 24 one-cut batches per epoch: the whole of epoch 0 and part of epoch 1
    overrides = {
        "trainer": {"max_steps": steps, "val_check_interval": steps},
        "batching": {"max_duration": 1.5},
    }
    spec = dataclasses.replace(with_overrides(spec, overrides), train_weights=WEIGHTS)
    summary, trained = train_recording_epochs(spec, tmp_path, monkeypatch)
    assert summary["status"] == "completed" and summary["steps"] == steps

    sets = [load_cuts(p).to_eager() for p in corpora]
    epoch0 = mix_epoch(sets, WEIGHTS, 0).ids
    assert sorted(trained[0]) == sorted(epoch0)  # the epoch is the mix, each cut once
    assert sum(i.startswith("new-") for i in trained[0]) == 18  # 3/4 of 24, not 12 of 24
    assert len(trained[1]) == steps - 24
    assert set(trained[1]) <= set(mix_epoch(sets, WEIGHTS, 1).ids)


def test_the_batch_audit_samples_the_first_epochs_mix(tmp_path):
    from asrflow.train.batches.loader import load_train_cuts

    spec = _two_corpora(tmp_path / "data")
    plain = load_train_cuts(spec).ids
    assert sum(i.startswith("new-") for i in plain) == 12  # no weights: every cut once
    mixed = load_train_cuts(dataclasses.replace(spec, train_weights=WEIGHTS)).ids
    assert sum(i.startswith("new-") for i in mixed) == 18


def test_sharded_weighted_corpora_train_on_each_epochs_shard_mix_and_audit_it(
    tmp_path, monkeypatch
):
    """The same on shards (issue 16): the epoch is mix_shards' plan, repeats under new IDs,
    and the batch audit audits the shard batches."""
    from asrflow.data.shards import ShardSettings, shard_fields, write_shards
    from asrflow.train.batches.shard_stream import mix_shards
    from asrflow.train.preflight.audit import audit_run

    spec = _two_corpora(tmp_path / "data")
    dirs = [tmp_path / "shards0", tmp_path / "shards1"]
    for cuts, out in zip(spec.train_cuts, dirs, strict=True):
        write_shards(cuts, out, ShardSettings(shard_size=2))
    longer = {"trainer": {"max_steps": 16, "val_check_interval": 16}}  # > 1 epoch
    spec = dataclasses.replace(
        with_overrides(spec, longer), train_weights=WEIGHTS, train_shards=[str(d) for d in dirs]
    )
    summary, trained = train_recording_epochs(spec, tmp_path, monkeypatch)
    assert summary["status"] == "completed", summary
    plan = mix_shards([shard_fields(d) for d in dirs], WEIGHTS, 0, seed=0)
    assert len(trained[0]) == len(set(trained[0])) == sum(s["num_cuts"] for s in plan)
    new = sum(s["num_cuts"] for s in plan if "shards1" in s["cuts"])
    assert sum(i.startswith("new-") for i in trained[0]) == new == 18  # 3/4 of 24
    assert trained[1]  # epoch 0 was trained whole
    report = audit_run(spec, tmp_path / "a.json", tmp_path / "a.png", tmp_path / "a.txt")
    assert report["source"] == "shards" and report["batches_per_epoch"][0] > 0
