"""What reruns when (issue 11), end to end on a copy of the finished tiny DAG (marked slow).

Each test changes one thing (a touched file, an operational key, audio, a transcript, a filter
bound, added utterances, an extra eval set, a new run, a library edit), checks the jobs
Snakemake plans or runs, and leaves the work dir as up to date as it found it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.e2e import REPO, dry_run, environment, executed, rule_counts, snakemake
from tests.tiny_dag import DOWNSTREAM_OF_TRAIN, restored, settle, status, trained_tiny

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The module's copy of the finished tiny DAG (:func:`tests.tiny_dag.trained_tiny`)."""
    return trained_tiny(tmp_path_factory).workdir


def test_changes_that_cannot_change_a_result_rerun_nothing(trained):
    assert dry_run(trained) == set()
    recipe, config = trained / "config/recipes/tiny.yaml", trained / "config.yaml"
    with restored(recipe, config):
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


def test_status_is_up_to_date_and_names_what_a_library_change_touches(trained, tmp_path):
    proc = status(trained)
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
    proc = status(trained, env=env)  # ... but is never invisible
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
    with restored(wav):
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
    with restored(manifest):
        rows = manifest.read_text().splitlines()
        first = json.loads(rows[0])
        rows[0] = json.dumps({**first, "text": first["text"] + " again"})
        manifest.write_text("\n".join(rows) + "\n")
        snakemake(trained, "--until", "validate_corpus")
        jobs = dry_run(trained)
        assert rule_counts(jobs) == {"filter_split": 1, **DOWNSTREAM_OF_TRAIN}
        assert "filter_split[corpus=tiny, split=dev]" in jobs
    settle(trained)


def test_a_train_filter_change_that_keeps_train_and_dev_changes_no_evaluation(trained):
    """Issue 30: the training filter shapes what is trained on, never an eval set. A bound that
    removes only the test split's longest utterance (3.6 s; train and dev are at most 3.3 and
    2.6 s) reruns the three filter jobs (their params changed), and once they have written
    train and dev as they were, nothing: before, the test set lost that utterance and its four
    evaluations reran on the rest."""
    config = trained / "config.yaml"
    with restored(config):
        cfg = yaml.safe_load(config.read_text())
        cfg["corpora"]["tiny"]["filter"] = {"max_duration": 3.5}
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        ran = executed(snakemake(trained, "--until", "filter_split"))
        assert rule_counts(ran) == {"filter_split": 3}, ran
        report = json.loads((trained / "results/data/tiny/filtered/test.report.json").read_text())
        assert report["removed_by_reason"]["too_long"] == 1
        assert dry_run(trained) == set()
    snakemake(trained, "--until", "filter_split")  # the default bounds back
    settle(trained)


def test_added_train_utterances_rerun_the_tokenizer_and_everything_after(trained):
    import soundfile

    manifest = trained / "results/corpora/tiny/train.jsonl"
    rows = manifest.read_text().splitlines()
    first = json.loads(rows[0])
    audio, rate = soundfile.read(manifest.parent / first["audio_filepath"])
    extra = manifest.parent / "audio/extra_00001.wav"
    with restored(manifest):
        soundfile.write(extra, audio * 0.5, rate)
        added = {**first, "audio_filepath": "audio/extra_00001.wav", "utt_id": "extra_00001"}
        manifest.write_text("\n".join([*rows, json.dumps(added)]) + "\n")
        snakemake(trained, "--until", "validate_corpus")
        jobs = dry_run(trained)
        expected = {"filter_split": 1, "train_tokenizer": 1, "word_lm": 1, "audit_batches": 1}
        assert rule_counts(jobs) == {**expected, **DOWNSTREAM_OF_TRAIN}
        assert "filter_split[corpus=tiny, split=train]" in jobs
    extra.unlink()
    settle(trained)


def test_a_new_extra_eval_set_evaluates_only_that_set(trained):
    config = trained / "config.yaml"
    with restored(config):
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
    with restored(config):
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
