"""The tiny corpus and model of the end-to-end training tests, and the finished DAG they share.

:func:`trained_tiny` builds the tiny DAG once per test session, the way issue 11's headline
scenario builds it (trained at one learning rate, the recipe changed, the whole DAG run again),
and hands each module its own copy (:func:`tests.e2e.built_once`): tests/test_training_e2e.py
checks what the DAG wrote, tests/test_revisions_e2e.py what reruns after each kind of change,
tests/test_weekly_loop_e2e.py fine-tunes it as last week's model. Three modules instead of one,
so that pytest-xdist (``--dist=loadfile``) runs them side by side once the DAG is built.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.e2e import REPO, built_once, dry_run, environment, rule_counts, snakemake, write_config

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
REVISED_RECORD = "revised.json"
"""Beside the built DAG: what it looked like around the learning-rate change."""


@dataclass(frozen=True)
class Revised:
    """The module's work dir, and what it looked like around its learning-rate change."""

    workdir: Path
    old_summary: dict
    planned: dict[str, int]  # the dry run's jobs by rule, right after the change
    status: str  # `asrflow status` right after the change


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


def status(workdir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
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
def restored(*paths: Path):
    """Put the files back as they were (new mtime, as an editor would) and let the data
    checkpoint settle again."""
    saved = {p: p.read_bytes() for p in paths}
    try:
        yield
    finally:
        for p, data in saved.items():
            p.write_bytes(data)


def settle(workdir: Path) -> None:
    snakemake(workdir, "--until", "validate_corpus")
    assert dry_run(workdir) == set()


def trained_tiny(tmp_path_factory: pytest.TempPathFactory) -> Revised:
    """A private copy of the finished tiny DAG (recipe: TINY_RECIPE with lr REVISED_LR), and
    what it looked like around its learning-rate change.

    Issue 11's headline scenario is how it is built (one whole DAG instead of two): the tiny run
    trained and partly evaluated at lr 0.002, then the recipe's lr changed to 0.0015 and the
    whole DAG run. The dry run and ``asrflow status`` right after the change are kept beside
    it (``revised.json``) for the test of that scenario."""

    def build(workdir: Path) -> None:
        setup_workdir(workdir, TINY_RECIPE)
        snakemake(workdir, *FIRST_PASS)
        old = json.loads((workdir / "results/runs/tiny_ctc/train/summary.json").read_text())
        recipe = json.loads(json.dumps(TINY_RECIPE))
        recipe["optim"]["lr"] = REVISED_LR
        (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))
        planned = rule_counts(dry_run(workdir))
        said = status(workdir).stdout  # asrflow status says why, as Snakemake sees it
        snakemake(workdir)
        record = {"old_summary": old, "planned": planned, "status": said}
        (workdir / REVISED_RECORD).write_text(json.dumps(record))

    workdir = built_once(tmp_path_factory, "tiny-trained", build)
    return Revised(workdir, **json.loads((workdir / REVISED_RECORD).read_text()))
