"""Real recorded speech through the whole workflow with every default (marked slow): CI's
smoke of ``bench/real_speech.py``.

The benchmark's ``--quick`` (one leave-one-speaker-out fold of ``../shared/corpora/fsdd4``, real
spoken digits at 8 kHz, held-out nicolas; three speakers train, dev held-out takes of theirs; a
config that names only the corpus and a run; recipe, tokenizer and decoding ``auto``; a short
budget) on the first few takes of every digit and speaker (``--source``). Checked: ``--plan``
prints the derived values before anything trains, and they reach the model (an 8-kHz frontend,
augmentation on for real speech), the tokenizer (characters for ten words) and the decoder (the
lexicon, since every dev word is a train word); the summary and the report carry the plan; the
selection says its dev holds only seen speakers; the benchmark's JSON has the fold's row. A few
minutes on 2 CPU cores; what the model learns in 40 steps is not the point (the full benchmark
measures that).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asrflow.corpus.folds import select_takes
from asrflow.recipe.rules import RULES_VERSION
from tests.e2e import REPO, environment

pytestmark = pytest.mark.slow

BENCH = REPO / "bench/real_speech.py"
FSDD = REPO.parent / "shared/corpora/fsdd4/all.jsonl"
TAKES_PER_DIGIT = 6
"""Of each speaker's 50 takes of each digit: 240 takes, ~1.5 minutes of train audio."""
STEPS = 40  # bench/real_speech.py's QUICK_OVERRIDES
RUN = "nicolas_devtakes"
CORPUS = f"fsdd_{RUN}"


def subset_manifest(out: Path) -> Path:
    """The first :data:`TAKES_PER_DIGIT` takes of every digit and speaker, audio by absolute
    path (the fold builder reads the shared recordings where they are)."""

    def first_takes(row: dict) -> bool:
        return int(Path(row["audio_filepath"]).stem.split("_")[-1]) < TAKES_PER_DIGIT

    return select_takes(FSDD, out, first_takes)


def bench(work: Path, *args: str) -> subprocess.CompletedProcess:
    """``bench/real_speech.py --quick`` on the subset, in ``work``."""
    source = work / "takes.jsonl"
    if not source.is_file():
        subset_manifest(source)
    command = [sys.executable, str(BENCH), "--quick", "--source", str(source),
               "--work", str(work / "project"), "--out", str(work / "out"), *args]  # fmt: skip
    proc = subprocess.run(
        command, capture_output=True, text=True, env=environment(), timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FSDD.is_file():
        pytest.skip(f"{FSDD} is not here (the shared corpora sit beside the checkout)")
    return tmp_path_factory.mktemp("real")


def test_the_plan_is_printed_before_anything_trains(work: Path) -> None:
    lines = bench(work, "--plan").stdout.splitlines()
    assert lines[0] == f"run {RUN}: recipe auto (rules version {RULES_VERSION})"
    assert "3 speakers" in lines[1] and "8 kHz" in lines[1] and "10 distinct words" in lines[1]
    text = "\n".join(lines)
    assert "frontend_conf.fs" in text and "8000: every train utterance is at 8 kHz" in text
    assert "specaug: real speech" in text
    assert f"(overridden by runs.{RUN}.overrides.trainer.max_steps; the rule says" in text
    assert not (work / f"project/results/runs/{RUN}/train").exists()  # nothing trained


def test_every_default_follows_the_real_corpus_to_the_report(work: Path) -> None:
    bench(work)
    results = work / "project/results"
    summary = json.loads((results / f"runs/{RUN}/train/summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    settings = summary["recipe_settings"]
    assert settings["frontend_conf"]["fs"] == 8000 and settings["frontend_conf"]["n_mels"] == 40
    assert settings["specaug"] == "specaug"
    assert settings["augmentation"]["speed_perturb"] == [0.9, 1.0, 1.1]
    assert settings["trainer"]["max_steps"] == STEPS  # the override, not the plan
    keys = {c["key"]: c for c in summary["plan"]["choices"]}
    assert keys["trainer.max_steps"]["overridden_by"] == "trainer.max_steps"
    tokenizer = json.loads((results / f"tokenizers/{CORPUS}_auto/summary.json").read_text())
    assert tokenizer["auto"]["model_type"] == "char"
    lm = json.loads((results / f"runs/{RUN}/lm/word_counts.json").read_text())
    assert lm["decoding"]["mode"] == "lexicon_lm"
    test_set = f"{CORPUS}.test"
    evaluation = json.loads((results / f"runs/{RUN}/eval/last/{test_set}/summary.json").read_text())
    assert evaluation["decoding"]["mode"] == "lexicon_lm"
    assert evaluation["utterances_scored"] == evaluation["utterances_total"] > 0
    selected = json.loads((results / f"runs/{RUN}/selected.json").read_text())
    assert selected["dev_measures"] == "seen speakers only"
    report = (results / "report/comparison.md").read_text()
    assert "## Derived recipes (recipe: auto)" in report
    assert "`frontend_conf.fs` = 8000" in report
    # the benchmark's own figures: the fold's row, read back from what the workflow left
    (row,) = json.loads((work / "out/real_speech.json").read_text())["rows"]
    assert row["fold"] == "nicolas" and row["run"] == RUN and row["train"]["steps"] == STEPS
    assert row["speakers"]["test"] == ["nicolas"] and len(row["speakers"]["train"]) == 3
    assert row["selected"] == selected["selected"]
    assert (
        row["test"]["wer"]
        == json.loads(
            (results / f"runs/{RUN}/eval/{row['selected']}/{test_set}/summary.json").read_text()
        )["wer"]
    )
    assert set(row["artifacts"]) == {"last", "valid.loss.best"}
