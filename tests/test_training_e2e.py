"""End-to-end training in the workflow on a tiny corpus and a tiny model (marked slow).

Covers the training issue's acceptance scenarios on the finished tiny DAG
(:func:`tests.tiny_dag.trained_tiny`): the DAG runs audit -> smoke -> train and writes summary,
checkpoints and diagnostics, exports, evaluations, the selection and the report; a learning-rate
change trains anew; a train job killed with SIGKILL midway resumes from its last checkpoint.
What reruns after each kind of change is in tests/test_revisions_e2e.py, the weekly fine-tuning
loop in tests/test_weekly_loop_e2e.py, training-time faults (a token-list mismatch, damaged
checkpoints, a full disk) in the bad-input catalogue, tests/test_bad_input.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from asrflow.data.cuts import load_cuts
from asrflow.hashing import sha256_file
from tests.e2e import copy_workdir, dry_run, environment, snakemake, snakemake_command
from tests.tiny_dag import (
    CONFIG,
    DOWNSTREAM_OF_TRAIN,
    REVISED_LR,
    TINY_RECIPE,
    Revised,
    trained_tiny,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def revised(tmp_path_factory) -> Revised:
    """The module's copy of the finished tiny DAG, with what it looked like around its
    learning-rate change (see :func:`tests.tiny_dag.trained_tiny`)."""
    return trained_tiny(tmp_path_factory)


@pytest.fixture(scope="module")
def trained(revised) -> Path:
    """The finished tiny DAG (recipe: TINY_RECIPE with lr 0.0015)."""
    return revised.workdir


def test_training_dag_writes_summary_checkpoints_and_diagnostics(trained):
    run = trained / "results/runs/tiny_ctc"
    summary = json.loads((run / "train/summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["steps"] == 24
    assert summary["update_budget"]["optimizer_steps"] == 24
    assert summary["effective_batch_seconds"] == 15.0
    assert set(summary["criteria"]) == {"valid/loss", "valid/wer"}
    assert len(summary["criteria"]["valid/loss"]["top_k"]) == 2
    checkpoints = sorted(p.name for p in (run / "train/artifacts/checkpoints").iterdir())
    assert "last.ckpt" in checkpoints
    assert sum(name.startswith("valid.loss.") for name in checkpoints) == 2
    assert sum(name.startswith("valid.wer.") for name in checkpoints) == 1
    transcripts = sorted((run / "train/artifacts/diagnostics/transcripts").glob("step*.txt"))
    assert [t.name for t in transcripts] == [
        "step0000008.txt",
        "step0000016.txt",
        "step0000024.txt",
    ]
    assert "REF:" in transcripts[-1].read_text()
    metrics = (run / "train/artifacts/csv/metrics.csv").read_text().splitlines()[0].split(",")
    for column in (
        "train/loss",
        "train/loss_per_token",
        "train/batch_tokens",
        "train/batch_utterances",
        "train/batch_audio_seconds",
        "train/padding_ratio",
        "train/grad_norm",
        "lr",
        "valid/loss",
        "valid/wer",
    ):
        assert column in metrics, column
    audit = json.loads((run / "audit/batches.json").read_text())
    assert audit["tokens_per_batch"]["cv"] >= 0
    assert (run / "audit/batches.png").stat().st_size > 0
    smoke = json.loads((run / "smoke/summary.json").read_text())
    assert smoke["status"] == "completed" and smoke["steps"] == 3
    assert len(smoke["export_decode"]) == 4  # decoded by Speech2Text from the exported package
    for path in (
        run / "train/summary.json",
        run / "smoke/summary.json",
        run / "audit/batches.json",
    ):
        assert path.with_name(path.name + ".prov.json").is_file()


def test_every_artifact_is_exported_as_a_package_espnet_loads(trained):
    from asrflow.export.package import load_speech2text, verify_package

    export = trained / "results/runs/tiny_ctc/export"
    assert sorted(p.name for p in export.iterdir() if p.is_dir()) == [
        "last",
        "valid.loss.ave_2best",
        "valid.loss.best",
        "valid.wer.best",
    ]
    average = trained / "results/runs/tiny_ctc/average/valid.loss.ave_2best.pth"
    assert average.is_file() and average.with_name(average.name + ".prov.json").is_file()
    for package in export.iterdir():
        if package.is_dir():
            verify_package(package)
    import soundfile

    manifest = trained / "results/corpora/tiny/dev.jsonl"
    row = json.loads(manifest.read_text().splitlines()[0])
    audio, _ = soundfile.read(manifest.parent / row["audio_filepath"], dtype="float32")
    speech2text = load_speech2text(export / "valid.loss.ave_2best")
    text, *_ = speech2text(audio)[0]
    assert isinstance(text, str)


def test_every_artifact_is_evaluated_selected_on_dev_and_reported(trained):

    run = trained / "results/runs/tiny_ctc"
    artifacts = ["last", "valid.loss.ave_2best", "valid.loss.best", "valid.wer.best"]
    contracts = set()
    word_lm = run / "lm/word_counts.json"  # counted from the train split alone
    train = load_cuts(trained / "results/data/tiny/filtered/train.jsonl.gz")
    assert json.loads(word_lm.read_text())["sentences"] == len(train)
    assert (run / "lm/word_counts.json.prov.json").is_file()
    validated = {
        s: [c.id for c in load_cuts(trained / f"results/data/tiny/validated/{s}.jsonl.gz")]
        for s in ("dev", "test")
    }
    filtered_dev = load_cuts(trained / "results/data/tiny/filtered/dev.jsonl.gz")
    assert len(filtered_dev) < len(validated["dev"])  # the training filter drops a 0.24-s one
    for artifact in artifacts:
        for eval_set in ("tiny.dev", "tiny.test"):
            summary = json.loads((run / "eval" / artifact / eval_set / "summary.json").read_text())
            # issue 30: the whole eval set is scored, not what the training filter kept
            ids = validated[eval_set.split(".")[1]]
            scored = pd.read_csv(run / "eval" / artifact / eval_set / "utterances.csv")["id"]
            assert sorted(scored) == sorted(ids)
            assert summary["utterances_scored"] == summary["utterances_total"] == len(ids)
            assert summary["utterances_excluded"] == 0 and summary["complete"] is True
            assert summary["decoding"]["window_seconds"] == 3.0
            assert summary["decoding"]["mode"] == "lexicon_lm"
            assert summary["word_lm_sha256"] == sha256_file(word_lm)
            assert summary["dtype"] == "bfloat16" and summary["autocast"] is False
            assert summary["dtypes"]["frontend"] == "float32"
            assert summary["num_utterances"] > 0 and summary["rtf"] > 0
            contracts.add(summary["contract_sha256"])
            assert (run / "eval" / artifact / eval_set / "utterances.csv").stat().st_size > 0
    assert len(contracts) == 1
    selected = json.loads((run / "selected.json").read_text())
    assert selected["eval_set"] == "tiny.dev" and selected["selected"] in artifacts
    assert set(selected["candidates"]) == set(artifacts)
    # issue 14: the average against the best single checkpoint, from the dev utterances.csv
    significance = selected["significance"]
    assert significance["artifact"] == "valid.loss.ave_2best"
    assert significance["against"] == selected["best_single"]["artifact"]
    assert significance["ci_low"] <= significance["ci_high"] and significance["resamples"] == 1000
    # issue 31: the synthetic corpus is split by speaker, so dev measures new speakers too
    groups = json.loads((trained / "results/data/tiny/validation.json").read_text())["groups"]
    assert not set(groups["dev"]["speaker"]) & set(groups["train"]["speaker"])
    assert selected["dev_measures"] is None and selected["dev_groups"] is None

    everything = pd.read_csv(trained / "results/report/comparison.csv")
    for column in ("run", "artifact", "eval_set", "wer", "cer", "selected", "status"):
        assert column in everything.columns, column
    assert everything["dev_measures"].isna().all()
    table = everything[everything["current"]]  # one earlier revision: see `revised`
    assert len(table) == 8 and set(table["status"]) == {"completed"}
    chosen = table[table["selected"]]
    assert set(chosen["artifact"]) == {selected["selected"]}
    assert set(chosen["eval_set"]) == {"tiny.dev", "tiny.test"}
    # issue 14: 95 % intervals of every figure, and each artifact against the selected one
    assert (table["wer_ci_low"] <= table["wer"]).all()
    assert (table["wer"] <= table["wer_ci_high"]).all()
    assert table[["cer_ci_low", "cer_ci_high"]].notna().all().all()
    reference = chosen.set_index("eval_set")["wer"]
    assert table["wer_diff_vs_selected"].to_numpy() == pytest.approx(
        (table["wer"] - table["eval_set"].map(reference)).to_numpy()
    )
    assert (chosen[["wer_diff_vs_selected", "wer_diff_vs_selected_ci_high"]] == 0).all().all()
    assert (table["wer_diff_vs_selected_ci_low"] <= table["wer_diff_vs_selected"]).all()
    markdown = (trained / "results/report/comparison.md").read_text()
    assert "tiny_ctc" in markdown and "| 15/15 |" in markdown and "(partial) |" not in markdown
    assert (table["utterances_scored"] == 15).all() and (table["utterances_excluded"] == 0).all()
    plots = trained / "results/report/plots/tiny_ctc"
    for name in ("learning_curves.png", "tiny.dev.slices.png", "tiny.test.slices.png"):
        # the learning curves from a real run's metrics.csv (tests/report/test_plots.py has the
        # synthetic ones)
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert (plots / f"{name}.prov.json").is_file(), name
    record = json.loads((trained / "results/report/comparison.csv.prov.json").read_text())
    # archived by weights: artifacts with identical weights (last and a best at the last step)
    # share one file per eval set; the report's record lists every one it read
    archived = list((trained / "results/archive/evals").glob("*.json"))
    assert len(record["extra_inputs"]["archive"]) == len(archived)
    assert len(archived) == 2 * len(set(table["artifact_sha256"])) + len(everything) - len(table)


# --- what reruns when (issue 11): each test leaves the work dir as up to date as it found it ---


def test_a_dry_run_of_the_finished_dag_never_imports_torch(trained):
    """Issue 13: building the DAG (every snakemake call, every SLURM job start) must not pay for
    the training stack; -X importtime lists every module the process imported."""
    command = snakemake_command("-n")
    proc = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]],
        cwd=trained,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "asrflow.layout" in imported  # the probe sees the workflow's own imports
    assert not imported & {"torch", "lightning", "espnet2", "torchaudio"}


def test_the_trained_dags_report_page_renders_in_a_browser(trained, tmp_path):
    """Issue 33: the page the workflow itself wrote (not a fixture's) in headless chromium at
    1366x768: the run's card, every inline figure shown, nothing wider than the window."""
    import base64

    from tests.report.test_html_browser import CHROMIUM, PNG_MAGIC, probe_page

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/run installs it as root)")
    page, probe = probe_page(trained / "results/report/comparison.html", tmp_path)
    assert [a["data-run"] for a in page.find("article", "card")] == ["tiny_ctc"]
    kinds = [a["data-kind"] for a in page.find("figure")]
    assert "differences" in kinds and "learning_curves" in kinds, kinds
    for a in page.find("img"):
        prefix, _, data = a["src"].partition(",")
        assert prefix == "data:image/png;base64"
        assert base64.b64decode(data, validate=True).startswith(PNG_MAGIC)
    assert all(i["complete"] and i["shown"] > 0 for i in probe["images"]), probe["images"]
    assert probe["scrollWidth"] <= probe["clientWidth"] and probe["overflowing"] == [], probe


def test_a_changed_learning_rate_trains_anew_and_every_row_says_so(revised):
    """Issue 11's headline: an lr change on a finished run trained 0 steps and relabelled the old
    weights. Now the run trains anew, and its summary, exports and report rows carry the new
    recipe hash; identical weights were decoded once; the average's record lists what it
    averaged. (The module's fixture made the change: see `revised`.)"""

    from asrflow.recipe.load import load_recipe
    from asrflow.runs import train_overrides
    from asrflow.settings import with_defaults

    trained, old = revised.workdir, revised.old_summary
    recipe = trained / "config/recipes/tiny.yaml"
    run = trained / "results/runs/tiny_ctc"
    # everything after the data and the tokenizer, as after any change to what a run trains from
    assert revised.planned == DOWNSTREAM_OF_TRAIN
    train_block = revised.status.split("train: results/runs/tiny_ctc/train/summary.json\n")[1]
    assert train_block.startswith("    params: "), revised.status
    summary = json.loads((run / "train/summary.json").read_text())
    overrides = train_overrides(with_defaults(CONFIG), "tiny_ctc")  # as the workflow reads it
    new_hash = load_recipe(recipe, overrides).identity_sha256()
    assert old["status"] == "completed" and old["recipe_settings"]["optim"]["lr"] == 0.002
    assert summary["resumed_from"] is None and summary["steps"] == 24
    assert summary["recipe_settings"]["optim"]["lr"] == REVISED_LR
    assert summary["hashes"]["recipe"] == new_hash != old["hashes"]["recipe"]
    assert len(list((trained / "results/work").glob("tiny_ctc.stale-*"))) == 1
    for package in run.glob("export/*/package.json"):
        assert json.loads(package.read_text())["provenance"]["run_hashes"]["recipe"] == new_hash
    log = (trained / "logs/train/tiny_ctc.log").read_text()
    assert f"recipe optim.lr: 0.002 -> {REVISED_LR}" in log
    table = pd.read_csv(trained / "results/report/comparison.csv")
    current = table[table["current"]]
    assert set(current["recipe_sha256"]) == {new_hash}
    # the lr 0.002 evaluation is kept as an earlier revision, naming the recipe that made it
    earlier = table[~table["current"]]
    assert set(earlier["recipe_sha256"]) == {old["hashes"]["recipe"]}
    assert earlier[["artifact", "eval_set"]].values.tolist() == [["last", "tiny.dev"]]
    assert dry_run(trained) == set()

    evaluations = [json.loads(p.read_text()) for p in run.glob("eval/*/*/summary.json")]
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in evaluations:
        groups.setdefault((e["artifact_sha256"], e["eval_set"]), []).append(e)
    for group in groups.values():  # one decode per distinct weights and eval set
        decoders = {json.dumps(e["decoded_by"], sort_keys=True) for e in group}
        assert len(decoders) == 1 and group[0]["decoded_by"]["artifact"] in {
            e["artifact"] for e in group
        }
    copied = sum(
        "copied, not decoded again" in p.read_text()
        for p in (trained / "logs/evaluate/tiny_ctc").rglob("*.log")
    )
    assert copied == len(evaluations) - len(groups)

    record = json.loads((run / "average/valid.loss.ave_2best.pth.prov.json").read_text())
    averaged = record["details"]["averaged"]
    assert len(averaged) == 2 and all(a["step"] and a["sha256"] for a in averaged)
    assert sorted(record["extra_inputs"]["checkpoints"]) == sorted(a["path"] for a in averaged)
    assert [a["score"] for a in averaged] == sorted(a["score"] for a in averaged)


def test_killed_train_job_resumes_from_its_last_checkpoint(trained, tmp_path):
    trained = copy_workdir(trained, tmp_path / "workdir")
    recipe = json.loads(json.dumps(TINY_RECIPE))
    recipe["trainer"].update(max_steps=48, val_check_interval=4)
    (trained / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))
    work = trained / "results/work/tiny_ctc"
    for ckpt in (work / "checkpoints").glob("*.ckpt"):
        ckpt.unlink()  # the finished 24-step run must not be what we resume from
    (work / "csv/metrics.csv").unlink()
    proc = subprocess.Popen(
        snakemake_command("results/runs/tiny_ctc/train/summary.json", "--forcerun", "train"),
        cwd=trained,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    last = work / "checkpoints/last.ckpt"
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            if last.is_file() and any(work.glob("checkpoints/valid.loss.step00000[1-3]*.ckpt")):
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the train job ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert last.is_file()
    killed_at = sorted(work.glob("checkpoints/valid.loss.step*.ckpt"))[-1].name
    snakemake(trained, "--unlock")  # what a user does after the Snakemake process itself died
    # only the train job: what follows a completed training is covered by the lr-change test
    snakemake(trained, "--rerun-incomplete", "results/runs/tiny_ctc/train/summary.json")
    summary = json.loads((trained / "results/runs/tiny_ctc/train/summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["resumed_from"] == str(Path("results/work/tiny_ctc/checkpoints/last.ckpt"))
    assert summary["steps"] == 48, killed_at
    # the resumed run continued the step count instead of starting again from step 0, and the
    # metrics rows of the killed run up to its checkpoint were kept (the learning curve is whole)
    rows = (work / "csv/metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    loss, step = header.index("train/loss"), header.index("step")
    steps = [int(r.split(",")[step]) for r in rows[1:] if r.split(",")[loss]]
    assert steps == list(range(48))
    log = (trained / "logs/train/tiny_ctc.log").read_text()
    assert "resuming run tiny_ctc from results/work/tiny_ctc/checkpoints/last.ckpt" in log
    assert "resume: skipped" in log  # the data order continues where it stopped
