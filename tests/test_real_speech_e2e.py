"""Real recorded speech through the whole workflow with every default (marked slow).

A small leave-one-speaker-out fold of ``../shared/corpora/fsdd4`` (real spoken digits, 8 kHz;
:func:`asrflow.corpus.folds.build_fold`): three speakers train (dev: held-out takes of theirs),
the fourth is the test set. The config names only the corpus and a run with a short budget;
recipe, tokenizer and decoding are ``auto``. Checked: ``asrflow plan`` prints the derived
values before anything trains, and they reach the model (an 8-kHz frontend, augmentation on for
real speech), the tokenizer (characters for ten words) and the decoder (the lexicon, since every
dev word is a train word); the summary and the report carry the plan; the selection says its dev
holds only seen speakers. A few minutes on 2 CPU cores; what the model learns in 40 steps is
not the point (the benchmark, ``bench/real_speech.py``, measures that).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asrflow.corpus.folds import FoldSettings, build_fold, select_takes
from asrflow.recipe.rules import RULES_VERSION
from tests.e2e import REPO, environment, snakemake, write_config

pytestmark = pytest.mark.slow

FSDD = REPO.parent / "shared/corpora/fsdd4/all.jsonl"
TAKES_PER_DIGIT = 6
"""Of each speaker's 50 takes of each digit: 240 takes, ~1.5 minutes of train audio."""
STEPS = 40


def subset_manifest(out: Path) -> Path:
    """The first :data:`TAKES_PER_DIGIT` takes of every digit and speaker, audio by absolute
    path (the fold builder reads the shared recordings where they are)."""

    def first_takes(row: dict) -> bool:
        return int(Path(row["audio_filepath"]).stem.split("_")[-1]) < TAKES_PER_DIGIT

    return select_takes(FSDD, out, first_takes)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FSDD.is_file():
        pytest.skip(f"{FSDD} is not here (the shared corpora sit beside the checkout)")
    work = tmp_path_factory.mktemp("real")
    source = subset_manifest(work / "takes.jsonl")
    fold = build_fold(source, work / "fold", FoldSettings(held_out="nicolas", dev="takes"))
    write_config(
        work,
        {
            "corpora": {
                "fsdd": {
                    "source": "nemo",
                    "manifests": {s: str(p) for s, p in fold.manifests.items()},
                    "validation": {"allow_group_overlap": ["speaker"]},
                }
            },
            "runs": {
                "real": {
                    "corpora": ["fsdd"],
                    "overrides": {
                        "trainer": {"max_steps": STEPS, "val_check_interval": STEPS // 2},
                        "best_model_criterion": [["valid/loss", 1, "min"]],
                    },
                    "resources": {"devices": 0, "cpus_per_device": 2},
                }
            },
        },
    )
    return work


def test_the_plan_is_printed_before_anything_trains(project: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "asrflow.cli", "plan", "real", "--",
         "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml", "--cores", "2"],
        cwd=project, capture_output=True, text=True, env=environment(), timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"run real: recipe auto (rules version {RULES_VERSION})"
    assert "3 speakers" in lines[1] and "8 kHz" in lines[1] and "10 distinct words" in lines[1]
    text = "\n".join(lines)
    assert "frontend_conf.fs" in text and "8000: every train utterance is at 8 kHz" in text
    assert "specaug: real speech" in text
    assert "(overridden by runs.real.overrides.trainer.max_steps; the rule says" in text
    assert not (project / "results/runs/real/train").exists()  # nothing trained


def test_every_default_follows_the_real_corpus_to_the_report(project: Path) -> None:
    snakemake(project)
    results = project / "results"
    summary = json.loads((results / "runs/real/train/summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    settings = summary["recipe_settings"]
    assert settings["frontend_conf"]["fs"] == 8000 and settings["frontend_conf"]["n_mels"] == 40
    assert settings["specaug"] == "specaug"
    assert settings["augmentation"]["speed_perturb"] == [0.9, 1.0, 1.1]
    assert settings["trainer"]["max_steps"] == STEPS  # the override, not the plan
    keys = {c["key"]: c for c in summary["plan"]["choices"]}
    assert keys["trainer.max_steps"]["overridden_by"] == "trainer.max_steps"
    tokenizer = json.loads((results / "tokenizers/fsdd_auto/summary.json").read_text())
    assert tokenizer["auto"]["model_type"] == "char"
    lm = json.loads((results / "runs/real/lm/word_counts.json").read_text())
    assert lm["decoding"]["mode"] == "lexicon_lm"
    evaluation = json.loads((results / "runs/real/eval/last/fsdd.test/summary.json").read_text())
    assert evaluation["decoding"]["mode"] == "lexicon_lm"
    assert evaluation["utterances_scored"] == evaluation["utterances_total"] > 0
    selected = json.loads((results / "runs/real/selected.json").read_text())
    assert selected["dev_measures"] == "seen speakers only"
    report = (results / "report/comparison.md").read_text()
    assert "## Derived recipes (recipe: auto)" in report
    assert "`frontend_conf.fs` = 8000" in report
