"""The weekly fine-tuning loop (issue 32) end to end: last week's model is the finished tiny
DAG (:func:`tests.tiny_dag.trained_tiny`), this week's data a new corpus (marked slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from asrflow.hashing import sha256_file
from tests.e2e import copy_workdir, dry_run, executed, snakemake
from tests.tiny_dag import CONFIG, trained_tiny

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The module's copy of the finished tiny DAG."""
    return trained_tiny(tmp_path_factory).workdir


WEEK2 = {
    "source": "synthetic",
    "synthetic": {**CONFIG["corpora"]["tiny"]["synthetic"], "num_utterances": 40, "seed": 3},
}
"""The weekly loop's data revision: new utterances of the same kind (another seed), a corpus
beside last week's (``tiny``), which the base run trained on and is not changed."""


def test_the_weekly_loop_fine_tunes_last_weeks_model_on_new_data_full_and_with_lora(
    trained, tmp_path
):
    """Issue 32, the weekly loop: a base run (tiny_ctc) is last week's model; a data revision
    adds a corpus; a child fine-tunes the base's selected package on it with rehearsal of last
    week's corpus (``weights``), and a sibling does the same with LoRA. One DAG trains both: the
    child starts from the package the parent's selection chose (a DAG edge through rule
    publish_selected) with the model and tokenizer that package describes; the LoRA sibling
    trains only its pairs and exports the merged model as a plain ESPnet package, evaluated in
    bf16; the report sets each child against the parent on the eval set they share (last week's
    test split: did the child forget it?). A republished parent that comes out byte-identical
    retrains nothing; another chosen model reruns both children."""
    import torch

    from asrflow.export.adapter import merge_adapter

    workdir = copy_workdir(trained, tmp_path / "workdir")
    config = workdir / "config.yaml"
    cfg = yaml.safe_load(config.read_text())
    cfg["corpora"]["week2"] = WEEK2
    parent = {k: v for k, v in cfg["runs"]["tiny_ctc"].items() if k != "tokenizer"}
    week = {"corpora": ["week2", "tiny"], "weights": [3, 1]}  # new data, rehearsal of the old
    # a short budget, and one criterion: baseline, last and best are enough to compare (each
    # artifact is evaluated on three eval sets)
    budget = {
        "trainer": {"max_steps": 8, "val_check_interval": 4},
        "best_model_criterion": [["valid/loss", 1, "min"]],
    }
    cfg["runs"]["child"] = {**parent, **week, "init": {"run": "tiny_ctc"}, "overrides": budget}
    lora = {"run": "tiny_ctc", "adapter": {"rank": 2, "alpha": 4}}
    cfg["runs"]["lora"] = {**parent, **week, "init": lora, "overrides": budget}
    cfg["report"] = {"baseline_run": "child"}  # siblings compared: what sets lora apart
    config.write_text(yaml.safe_dump(cfg))
    summary_file = "results/runs/child/train/summary.json"
    jobs = dry_run(workdir, summary_file)
    assert "publish_selected[run=tiny_ctc]" in {j.replace(" ", "") for j in jobs}, jobs
    assert not any("run=tiny_ctc" in j for j in jobs if not j.startswith("publish")), jobs
    evaluation = "results/runs/lora/eval/last/week2.dev/summary.json"
    snakemake(workdir, summary_file, evaluation, "results/report/comparison.csv")

    # the full fine-tune: the parent's selected package, its model and its tokenizer
    selected = json.loads((workdir / "results/runs/tiny_ctc/selected.json").read_text())
    summary = json.loads((workdir / summary_file).read_text())
    assert summary["status"] == "completed", summary
    assert summary["init"]["run"] == "tiny_ctc"
    assert summary["init"]["model"] == "results/runs/tiny_ctc/selected"
    assert summary["init"]["package"]["artifact"] == selected["selected"]
    assert summary["init"]["package"]["provenance"], summary["init"]["package"]
    assert summary["init"]["fresh_keys"] == 0, summary["init"]
    assert summary["init"]["vocabulary"]["same"] is True, summary["init"]
    tokenizer = json.loads((workdir / "results/runs/child/tokenizer/summary.json").read_text())
    assert tokenizer["source"]["model"] == "results/runs/tiny_ctc/selected"
    assert all(c["utterances_with_unknown"] == 0 for c in tokenizer["coverage"].values())
    parent_tokens = workdir / "results/runs/tiny_ctc/selected/tokens.txt"
    assert (workdir / "results/runs/child/tokenizer/tokens.txt").read_text() == (
        parent_tokens.read_text()
    )
    assert summary["architecture"]["from"] == "results/runs/tiny_ctc/selected/config.yaml"
    assert summary["steps"] == 8

    # the LoRA sibling: only its pairs train; the export is the merged model
    summary = json.loads((workdir / "results/runs/lora/train/summary.json").read_text())
    init = summary["init"]
    assert init["adapter"]["rank"] == 2 and init["adapted_modules"] == 2, init  # one block: q, v
    assert summary["trainable_parameters"] == init["adapter_parameters"] > 0, summary
    assert summary["trainable_parameters"] < summary["num_parameters"] / 5, summary
    package = workdir / "results/runs/lora/export/last"
    weights = torch.load(package / "model.pth", weights_only=True)
    assert not any("lora" in k for k in weights), sorted(weights)[:5]
    parent_weights = torch.load(
        workdir / "results/runs/tiny_ctc/selected/model.pth", weights_only=True
    )
    assert set(weights) == set(parent_weights)
    # BatchNorm's running statistics are buffers: they follow the new data in train mode
    # (as with ESPnet's freeze_param); every parameter but the adapted ones is the parent's
    buffers = ("running_mean", "running_var", "num_batches_tracked")
    moved = [k for k in weights if not torch.equal(weights[k], parent_weights[k])]
    params = [k for k in moved if not k.endswith(buffers)]
    assert params and all(k.endswith(("linear_q.weight", "linear_v.weight")) for k in params)
    # beside it the adapter-only export: the two adapted layers as rank-2 factors, the moved
    # buffers whole, and the parent's hash; rebuilt from the parent's weights it is the model
    adapter = json.loads((package / "package.json").read_text())["adapter"]
    assert adapter["low_rank_tensors"] == 2, adapter
    assert adapter["whole_tensors"] == len(moved) - 2, adapter
    assert adapter["base_model_sha256"] == sha256_file(
        workdir / "results/runs/tiny_ctc/selected/model.pth"
    )
    assert adapter["bytes"] < (package / "model.pth").stat().st_size, adapter
    rebuilt = merge_adapter(package, workdir / "results/runs/tiny_ctc/selected/model.pth")
    assert all(torch.allclose(rebuilt[k], weights[k], rtol=0, atol=1e-5) for k in weights)
    scored = json.loads((workdir / evaluation).read_text())
    assert scored["utterances_scored"] == scored["utterances_total"] > 0, scored

    # the report: each child's selected model against its parent's, utterance by utterance, on
    # last week's test split (the new corpus is the children's dev set; the parent never saw it)
    report = pd.read_csv(workdir / "results/report/comparison.csv")
    for child in ("child", "lora"):
        chosen = report[(report["run"] == child) & report["selected"]]
        assert set(chosen["eval_set"]) == {"week2.dev", "week2.test", "tiny.test"}, chosen
        assert (chosen["parent_run"] == "tiny_ctc").all(), chosen
        shared = chosen[chosen["eval_set"] == "tiny.test"]
        assert shared["wer_diff_vs_parent"].notna().all(), shared
    assert report.loc[report["run"] == "tiny_ctc", "parent_run"].isna().all()
    # against its full sibling, the LoRA run names what it trains differently
    changed = report.loc[report["run"] == "lora", "changed_vs_baseline"].dropna().unique()
    assert len(changed) == 1 and "adapter none -> lora r2 a4" in changed[0], changed
    # the LoRA sibling's trained artifacts carry their adapter's size (the baseline, the
    # parent's weights as they are, has none, nor has the full fine-tune)
    trained_lora = report[(report["run"] == "lora") & (report["artifact"] != "baseline")]
    assert len(trained_lora) and trained_lora["adapter_bytes"].notna().all(), trained_lora
    assert report.loc[report["run"] != "lora", "adapter_bytes"].isna().all()

    # the parent republished with the same bytes (as when a new eval set reselects every run):
    # no child retrains, in the same invocation either. Snakemake re-plans after the checkpoint
    # publish_selected and drops the children's tokenizer and smoke jobs; their audit and train
    # jobs still start (Snakemake 9 keeps the reason it planned them with) and find the run
    # finished in its work directory: no step, no checkpoint written
    children = (summary_file, "results/runs/lora/train/summary.json")
    last = [workdir / f"results/work/{c}/checkpoints/last.ckpt" for c in ("child", "lora")]
    before = [p.stat().st_mtime_ns for p in last]
    proc = snakemake(workdir, *children, "--forcerun", "publish_selected")
    ran = executed(proc)
    assert "publish_selected[run=tiny_ctc]" in ran, ran
    assert not [j for j in ran if j.startswith(("init_tokenizer", "smoke_train"))], ran
    assert [p.stat().st_mtime_ns for p in last] == before
    assert dry_run(workdir, *children) == set()
    # the parent retrains (its own override changed): its new selection reaches both children
    cfg["runs"]["tiny_ctc"]["overrides"] = {"trainer": {"seed": 1}}
    config.write_text(yaml.safe_dump(cfg))
    jobs = dry_run(workdir, summary_file, "results/runs/lora/train/summary.json")
    for job in ("train[run=tiny_ctc]", "publish_selected[run=tiny_ctc]", "train[run=child]",
                "train[run=lora]"):  # fmt: skip
        assert job in jobs, jobs
