"""End-to-end training in the workflow on a tiny corpus and a tiny model (marked slow).

Covers the training issue's acceptance scenarios: the DAG runs audit -> smoke -> train and writes
summary, checkpoints and diagnostics; a train job killed with SIGKILL midway resumes from its
last checkpoint. Training-time faults (a token-list mismatch, damaged checkpoints, a full disk)
are in the bad-input catalogue, tests/test_bad_input.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from asrflow.data.cuts import load_cuts
from asrflow.hashing import sha256_file
from tests.e2e import (
    REPO,
    built_once,
    dry_run,
    environment,
    executed,
    rule_counts,
    snakemake,
    snakemake_command,
    write_config,
)

pytestmark = pytest.mark.slow

TINY_RECIPE = {
    "frontend": "default",
    "frontend_conf": {
        "fs": 16000,
        "n_fft": 400,
        "win_length": 400,
        "hop_length": 160,
        "n_mels": 40,
    },
    "specaug": None,
    "normalize": "utterance_mvn",
    "encoder": "conformer",
    "encoder_conf": {
        "output_size": 32,
        "attention_heads": 2,
        "linear_units": 64,
        "num_blocks": 1,
        "input_layer": "conv2d",
        "cnn_module_kernel": 7,
        "rel_pos_type": "latest",
        "pos_enc_layer_type": "rel_pos",
        "selfattention_layer_type": "rel_selfattn",
        "use_cnn_module": True,
    },
    "ctc_conf": {"dropout_rate": 0.0},
    "model_conf": {
        "ctc_weight": 1.0,
        "report_cer": False,
        "report_wer": False,
        "length_normalized_loss": False,
    },
    "trainer": {"max_steps": 24, "val_check_interval": 8, "gradient_clip_val": 5.0},
    "optim": {"name": "adamw", "lr": 0.002},
    "scheduler": {"warmup": 0.1},
    "batching": {"max_duration": 15.0, "num_buckets": 2, "num_workers": 0},
    "best_model_criterion": [["valid/loss", 2, "min"], ["valid/wer", 1, "min"]],
    "diagnostics": {"num_decode_utterances": 3},
}

CONFIG = {
    "corpora": {
        "tiny": {
            "source": "synthetic",
            "synthetic": {
                "num_utterances": 60,
                "seed": 2,
                "num_speakers": 4,
                "dev_speakers": 1,
                "test_speakers": 1,
                "sessions_per_speaker": 1,
                "long_fraction": 0.0,
            },
        }
    },
    "tokenizers": {"tiny_char": {"corpus": "tiny", "model_type": "char"}},
    "runs": {
        "tiny_ctc": {
            "corpora": ["tiny"],
            "tokenizer": "tiny_char",
            "recipe": "tiny",
            "resources": {"cpus_per_device": 2},
        }
    },
    # the demo config's decoding: the rule word_lm and the lexicon + bigram search in the DAG;
    # the test split's longest utterance (3.6 s) is decoded in windows
    "evaluation": {
        "decoding": {"mode": "lexicon_lm", "beam_size": 10},
        "window_seconds": 3.0,
        "window_overlap_seconds": 1.0,
    },
}


TINY_DATA = (
    *(f"results/data/tiny/filtered/{split}.jsonl.gz" for split in ("train", "dev", "test")),
    "results/tokenizers/tiny_char/bpe.model",
)
"""CONFIG's corpus made, imported, validated and filtered, and its tokenizer trained."""


def prepared_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work dir with :data:`TINY_DATA` done, built once per test session and copied
    (:func:`tests.e2e.built_once`), for modules that train on CONFIG's corpus and never change
    it (test_replicas_e2e, test_slurm_srun). Its config is CONFIG and its recipe TINY_RECIPE; a
    test may write others over them (data and tokenizer keys unchanged).

    Not for a test that changes audio or manifests: the copy's cuts name the audio of the shared
    build by absolute path (Lhotse's cuts do), so a change to the copy's audio goes unseen and a
    change made through the cuts would reach every module; re-imported, the copy's own manifests
    give cuts with other paths, hence other hashes, and everything after them reruns."""

    def build(workdir: Path) -> None:
        setup_workdir(workdir, TINY_RECIPE)  # the DAG reads the run's recipe
        snakemake(workdir, *TINY_DATA)

    return built_once(tmp_path_factory, "tiny-data", build)


def setup_workdir(workdir: Path, recipe: dict) -> None:
    write_config(workdir, CONFIG)
    (workdir / "config/recipes").mkdir(parents=True, exist_ok=True)
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))


FIRST_PASS = (
    "results/runs/tiny_ctc/eval/last/tiny.dev/summary.json",
    "results/data/tiny/filtered/test.jsonl.gz",
)
"""What the work dir had before its learning rate changed: every data step, a completed training
and one of its evaluations (archived, so that the report has an earlier revision to keep)."""
REVISED_LR = 0.0015


@dataclass(frozen=True)
class Revised:
    """The module's work dir, and what it looked like around its learning-rate change."""

    workdir: Path
    old_summary: dict
    planned: dict[str, int]  # the dry run's jobs by rule, right after the change
    status: str  # `asrflow status` right after the change


@pytest.fixture(scope="module")
def revised(tmp_path_factory) -> Revised:
    """Issue 11's headline scenario, which is also how the module's work dir is built (one whole
    DAG instead of two): the tiny run trained and partly evaluated at lr 0.002, then the recipe's
    lr changed to 0.0015 and the whole DAG run."""
    workdir = tmp_path_factory.mktemp("train")  # not prepared_tiny: tests here change the data
    setup_workdir(workdir, TINY_RECIPE)
    snakemake(workdir, *FIRST_PASS)
    old = json.loads((workdir / "results/runs/tiny_ctc/train/summary.json").read_text())
    recipe = json.loads(json.dumps(TINY_RECIPE))
    recipe["optim"]["lr"] = REVISED_LR
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))
    planned = rule_counts(dry_run(workdir))
    status = _status(workdir).stdout  # asrflow status says why, as Snakemake sees it
    snakemake(workdir)
    return Revised(workdir, old, planned, status)


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
    import pandas as pd

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

DOWNSTREAM_OF_TRAIN = {
    "smoke_train": 1,
    "train": 1,
    "average_checkpoints": 1,
    "export_artifact": 4,
    "plot_learning_curves": 1,
    "evaluate": 8,
    "plot_slices": 2,
    "select_model": 1,
    "report": 1,
    "plot_differences": 1,
}
"""The jobs after a change to what a run trains from (its audit reruns only for batching)."""


def _status(workdir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    args = ["--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml"]
    return subprocess.run(
        [sys.executable, "-m", "asrflow.cli", "status", "--", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env=env or environment(),
    )


@contextlib.contextmanager
def _restored(*paths: Path):
    """Put the files back as they were (new mtime, as an editor would) and let the data
    checkpoint settle again."""
    saved = {p: p.read_bytes() for p in paths}
    try:
        yield
    finally:
        for p, data in saved.items():
            p.write_bytes(data)


def _private_copy(workdir: Path, tmp_path: Path) -> Path:
    """A copy of the shared finished workdir (8 MB) for a test that changes its recipe, so that
    every other test still sees the recipe it was written against, in any order."""
    copy = tmp_path / "workdir"
    shutil.copytree(workdir, copy, symlinks=True, ignore=shutil.ignore_patterns("locks"))
    return copy


def _settle(workdir: Path) -> None:
    snakemake(workdir, "--until", "validate_corpus")
    assert dry_run(workdir) == set()


def test_changes_that_cannot_change_a_result_rerun_nothing(trained):
    assert dry_run(trained) == set()
    recipe, config = trained / "config/recipes/tiny.yaml", trained / "config.yaml"
    with _restored(recipe, config):
        os.utime(trained / "results/corpora/tiny/dev.jsonl")  # touched, content unchanged
        data = yaml.safe_load(recipe.read_text())
        data["diagnostics"]["num_decode_utterances"] = 1  # operational recipe keys
        data["batching"]["num_workers"] = 1
        data["batching"]["worker_nice"] = 5
        reordered = dict(reversed(list(data.items())))
        recipe.write_text("# a comment\n" + yaml.safe_dump(reordered, sort_keys=False))
        cfg = yaml.safe_load(config.read_text())
        cfg["evaluation"].update(batch_seconds=30, device="cpu")
        synthetic = cfg["corpora"]["tiny"]["synthetic"]  # the same settings in another order
        cfg["corpora"]["tiny"]["synthetic"] = dict(reversed(list(synthetic.items())))
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        assert dry_run(trained) == set()


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


def test_status_is_up_to_date_and_names_what_a_library_change_touches(trained, tmp_path):
    proc = _status(trained)
    assert proc.returncode == 0 and "up to date" in proc.stdout, proc.stdout + proc.stderr
    src = tmp_path / "src"  # a checkout whose scoring module was edited
    shutil.copytree(REPO / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    # the library reads its defaults from the checkout's schema (asrflow.settings.schema_file)
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config/config.schema.yaml", tmp_path / "config")
    scoring = src / "asrflow/evaluate/scoring.py"
    original = scoring.read_text()
    scoring.write_text(original + "\n# an edit that changes nothing\n")
    env = {**environment(), "PYTHONPATH": str(src)}
    assert dry_run(trained, env=env) == set()  # a library edit reruns nothing by itself ...
    proc = _status(trained, env=env)  # ... but is never invisible
    assert proc.returncode == 1, proc.stdout + proc.stderr
    flagged = {line.split(":")[0] for line in proc.stdout.splitlines() if not line[:1].isspace()}
    assert "evaluate" in flagged and "train_tokenizer" not in flagged, proc.stdout
    assert "code: asrflow.evaluate.scoring (changed since the step ran it)" in proc.stdout
    # a new scorer version reruns every evaluation, the choice on dev and the report
    version = re.search(r"^SCORING_VERSION = (\d+)$", original, re.M)
    bumped = original.replace(version.group(0), f"SCORING_VERSION = {int(version.group(1)) + 1}")
    scoring.write_text(bumped)
    after_evaluate = {
        "evaluate": 8,
        "select_model": 1,
        "plot_slices": 2,
        "report": 1,
        "plot_differences": 1,
    }
    assert rule_counts(dry_run(trained, env=env)) == after_evaluate
    # so does a new decoder version (a change that can change a transcript)
    scoring.write_text(original)
    versions = src / "asrflow/evaluate/versions.py"
    text = versions.read_text()
    version = re.search(r"^DECODER_VERSION = (\d+)$", text, re.M)
    versions.write_text(
        text.replace(version.group(0), f"DECODER_VERSION = {int(version.group(1)) + 1}")
    )
    assert rule_counts(dry_run(trained, env=env)) == after_evaluate


def test_audio_changed_after_the_gate_reimports_and_revalidates_its_split(trained):
    row = json.loads((trained / "results/corpora/tiny/dev.jsonl").read_text().splitlines()[0])
    wav = trained / "results/corpora/tiny" / row["audio_filepath"]
    with _restored(wav):
        wav.write_bytes(wav.read_bytes()[: wav.stat().st_size // 2])  # truncated
        jobs = dry_run(trained)
        imports = {j for j in jobs if j.startswith("import_manifest")}
        assert imports == {"import_manifest[corpus=tiny, split=dev]"}
        assert "validate_corpus[corpus=tiny]" in jobs
        proc = snakemake(trained, check=False)  # the gate refuses the truncated file
        assert proc.returncode != 0
        log = (trained / "logs/validate_corpus/tiny.log").read_text()
        assert f"{row['utt_id']}: audio " in log and "is truncated: its header says" in log
    proc = snakemake(trained)  # restored: imported again (the same cuts) and validated
    assert executed(proc) == {
        "import_manifest[corpus=tiny, split=dev]",
        "validate_corpus[corpus=tiny]",
    }
    assert dry_run(trained) == set()


def test_a_dev_transcript_change_reruns_training_but_not_the_tokenizer(trained):
    manifest = trained / "results/corpora/tiny/dev.jsonl"
    with _restored(manifest):
        rows = manifest.read_text().splitlines()
        first = json.loads(rows[0])
        rows[0] = json.dumps({**first, "text": first["text"] + " again"})
        manifest.write_text("\n".join(rows) + "\n")
        snakemake(trained, "--until", "validate_corpus")
        jobs = dry_run(trained)
        assert rule_counts(jobs) == {"filter_split": 1, **DOWNSTREAM_OF_TRAIN}
        assert "filter_split[corpus=tiny, split=dev]" in jobs
    _settle(trained)


def test_a_train_filter_change_that_keeps_train_and_dev_changes_no_evaluation(trained):
    """Issue 30: the training filter shapes what is trained on, never an eval set. A bound that
    removes only the test split's longest utterance (3.6 s; train and dev are at most 3.3 and
    2.6 s) reruns the three filter jobs (their params changed), and once they have written
    train and dev as they were, nothing: before, the test set lost that utterance and its four
    evaluations reran on the rest."""
    config = trained / "config.yaml"
    with _restored(config):
        cfg = yaml.safe_load(config.read_text())
        cfg["corpora"]["tiny"]["filter"] = {"max_duration": 3.5}
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        ran = executed(snakemake(trained, "--until", "filter_split"))
        assert rule_counts(ran) == {"filter_split": 3}, ran
        report = json.loads((trained / "results/data/tiny/filtered/test.report.json").read_text())
        assert report["removed_by_reason"]["too_long"] == 1
        assert dry_run(trained) == set()
    snakemake(trained, "--until", "filter_split")  # the default bounds back
    _settle(trained)


def test_added_train_utterances_rerun_the_tokenizer_and_everything_after(trained):
    import soundfile

    manifest = trained / "results/corpora/tiny/train.jsonl"
    rows = manifest.read_text().splitlines()
    first = json.loads(rows[0])
    audio, rate = soundfile.read(manifest.parent / first["audio_filepath"])
    extra = manifest.parent / "audio/extra_00001.wav"
    with _restored(manifest):
        soundfile.write(extra, audio * 0.5, rate)
        added = {**first, "audio_filepath": "audio/extra_00001.wav", "utt_id": "extra_00001"}
        manifest.write_text("\n".join([*rows, json.dumps(added)]) + "\n")
        snakemake(trained, "--until", "validate_corpus")
        jobs = dry_run(trained)
        expected = {"filter_split": 1, "train_tokenizer": 1, "word_lm": 1, "audit_batches": 1}
        assert rule_counts(jobs) == {**expected, **DOWNSTREAM_OF_TRAIN}
        assert "filter_split[corpus=tiny, split=train]" in jobs
    extra.unlink()
    _settle(trained)


def test_a_new_extra_eval_set_evaluates_only_that_set(trained):
    config = trained / "config.yaml"
    with _restored(config):
        cfg = yaml.safe_load(config.read_text())
        cfg["evaluation"]["extra_sets"] = ["tiny.train"]
        config.write_text(yaml.safe_dump(cfg))
        jobs = dry_run(trained)
        assert rule_counts(jobs) == {
            "evaluate": 4,
            "plot_slices": 1,
            "report": 1,
            "plot_differences": 1,
        }
        assert all("eval_set=tiny.train" in j for j in jobs if j.startswith("evaluate"))


def test_a_new_run_on_a_trained_corpus_reruns_none_of_the_jobs_before_it(trained):
    """Comparing a recipe means adding a run beside a trained one. The corpus's validation took
    the runs' names with their frontends' rates as a param, so a new run revalidated the
    corpus and retrained every run on it; now only the new run's jobs and the report run."""
    config = trained / "config.yaml"
    with _restored(config):
        cfg = yaml.safe_load(config.read_text())
        cfg["runs"]["tiny_ctc_b"] = {
            **cfg["runs"]["tiny_ctc"],
            "overrides": {"batching": {"seed": 1}},
        }
        config.write_text(yaml.safe_dump(cfg))
        jobs = dry_run(trained)
        new = {j for j in jobs if "run=tiny_ctc_b" in j}
        assert {j.split("[")[0] for j in new} >= {"audit_batches", "smoke_train", "train"}, jobs
        assert {j.split("[")[0] for j in jobs - new} <= {"report", "plot_differences"}, jobs


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

    workdir = _private_copy(trained, tmp_path)
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
    # the LoRA sibling's trained artifacts carry their adapter's size (the baseline, the
    # parent's weights as they are, has none, nor has the full fine-tune)
    trained_lora = report[(report["run"] == "lora") & (report["artifact"] != "baseline")]
    assert len(trained_lora) and trained_lora["adapter_bytes"].notna().all(), trained_lora
    assert report.loc[report["run"] != "lora", "adapter_bytes"].isna().all()

    # the parent republished with the same bytes: nothing of the children reruns
    snakemake(workdir, "results/runs/tiny_ctc/selected/model.pth", "--forcerun", "publish_selected")
    assert dry_run(workdir, summary_file, "results/runs/lora/train/summary.json") == set()
    # the parent retrains (its own override changed): its new selection reaches both children
    cfg["runs"]["tiny_ctc"]["overrides"] = {"trainer": {"seed": 1}}
    config.write_text(yaml.safe_dump(cfg))
    jobs = dry_run(workdir, summary_file, "results/runs/lora/train/summary.json")
    for job in ("train[run=tiny_ctc]", "publish_selected[run=tiny_ctc]", "train[run=child]",
                "train[run=lora]"):  # fmt: skip
        assert job in jobs, jobs


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
    import pandas as pd

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
    trained = _private_copy(trained, tmp_path)
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
