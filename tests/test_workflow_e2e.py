"""End-to-end runs of the Snakemake workflow on a small demo corpus (marked slow).

These are the issue's acceptance scenarios: the DAG runs, reruns schedule only what changed,
planted manifest errors stop it naming the line, and `asrflow verify` catches a flipped byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from asrflow.cli import main as asrflow_main
from asrflow.data.cuts import load_cuts, save_cuts
from asrflow.data.shards import find_cut, iter_shard_ids, read_index
from tests.e2e import executed, snakemake, write_config

pytestmark = pytest.mark.slow

SHARDS = "results/data/demo/shards/train"
SPLITS = ("train", "dev", "test")

DEMO_CONFIG = {
    "corpora": {
        "demo": {
            "source": "synthetic",
            "synthetic": {
                "num_utterances": 72,
                "seed": 5,
                "num_speakers": 6,
                "dev_speakers": 1,
                "test_speakers": 1,
                "sessions_per_speaker": 2,
                "long_fraction": 0.0,
            },
            "shards": {"shard_size": 20},
        }
    },
    "tokenizers": {"demo_char": {"corpus": "demo", "model_type": "char"}},
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("demo")
    write_config(workdir, DEMO_CONFIG)
    snakemake(workdir)
    return workdir


def test_demo_runs_through_the_data_half(demo):
    assert (demo / "results/tokenizers/demo_char/tokens.txt").is_file()
    report = json.loads((demo / "results/data/demo/validation.json").read_text())
    assert report["ok"] and set(report["splits"]) == {"train", "dev", "test"}
    for split in ("train", "dev", "test"):
        assert (demo / f"results/data/demo/filtered/{split}.jsonl.gz").is_file()
        assert (demo / f"results/data/demo/filtered/{split}.jsonl.gz.prov.json").is_file()
    assert (demo / "logs/validate_corpus/demo.log").is_file()
    index = read_index(demo / SHARDS)  # the train split, as shards of 20 cuts
    filtered = load_cuts(demo / "results/data/demo/filtered/train.jsonl.gz")
    assert index["num_cuts"] == len(filtered) and len(index["shards"]) == -(-len(filtered) // 20)
    assert [cut_id for *_, cut_id in iter_shard_ids(demo / SHARDS)] == [c.id for c in filtered]
    assert (demo / f"{SHARDS}.prov.json").is_file()
    assert not (demo / "results/data/demo/shards/dev").exists()  # only what training reads


def test_rerun_with_unchanged_inputs_schedules_nothing(demo):
    assert "Nothing to be done" in snakemake(demo, "-n").stdout + snakemake(demo, "-n").stderr


def test_touch_without_change_reruns_nothing_downstream(demo):
    os.utime(demo / "results/corpora/demo/test.jsonl")
    ran = executed(snakemake(demo))
    assert ran <= {"import_manifest[corpus=demo, split=test]"}, ran


def with_changed_transcript(manifest: Path, at: int) -> str:
    """``manifest``'s text with " again" appended to the transcript of line ``at``."""
    lines = manifest.read_text().splitlines()
    row = json.loads(lines[at])
    row["text"] += " again"
    lines[at] = json.dumps(row)
    return "\n".join(lines) + "\n"


def test_changed_test_transcript_reruns_only_the_test_split(demo):
    manifest = demo / "results/corpora/demo/test.jsonl"
    original, changed = manifest.read_text(), with_changed_transcript(manifest, 2)
    untouched = [
        demo / "results/data/demo/filtered/train.jsonl.gz",
        demo / "results/tokenizers/demo_char/bpe.model",
        demo / SHARDS / "shards.json",
    ]
    before = [p.stat().st_mtime_ns for p in untouched]
    try:
        manifest.write_text(changed)
        ran = executed(snakemake(demo))
        assert ran == {
            "import_manifest[corpus=demo, split=test]",
            "validate_corpus[corpus=demo]",
            "filter_split[corpus=demo, split=test]",
        }, ran
        assert [p.stat().st_mtime_ns for p in untouched] == before
    finally:
        manifest.write_text(original)
        snakemake(demo)


def test_changed_train_transcript_rewrites_the_train_shards_and_only_its_shard_differs(demo):
    shards = demo / SHARDS
    target = list(iter_shard_ids(shards))[-1][2]  # a cut of the last shard
    manifest = demo / "results/corpora/demo/train.jsonl"
    original = manifest.read_text()
    (at,) = [i for i, line in enumerate(original.splitlines()) if target in line]
    changed = with_changed_transcript(manifest, at)
    before = {p.name: p.read_bytes() for p in shards.iterdir()}
    try:
        manifest.write_text(changed)
        ran = executed(snakemake(demo))
        assert ran == {
            "import_manifest[corpus=demo, split=train]",
            "validate_corpus[corpus=demo]",
            "filter_split[corpus=demo, split=train]",
            "shard_split[corpus=demo, split=train]",
            "train_tokenizer[tokenizer=demo_char]",
        }, ran
        after = {p.name: p.read_bytes() for p in shards.iterdir()}
        differ = sorted(name for name in before if before[name] != after[name])
        assert differ == [Path(find_cut(shards, target)["cuts"]).name, "shards.json"], differ
    finally:
        manifest.write_text(original)
        snakemake(demo)
    assert {p.name: p.read_bytes() for p in shards.iterdir()} == before


def test_verify_flags_a_single_flipped_byte(demo, capsys):
    assert asrflow_main(["verify", str(demo / "results")]) == 0
    target = demo / "results/data/demo/filtered/dev.jsonl.gz"
    data = bytearray(target.read_bytes())
    stat = target.stat()
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    capsys.readouterr()
    try:
        assert asrflow_main(["verify", str(demo / "results")]) == 1
        assert "filtered/dev.jsonl.gz" in capsys.readouterr().out
    finally:
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))


def copy_demo_manifests(demo: Path, dest: Path) -> dict[str, Path]:
    """Copies of the demo manifests elsewhere, with absolute audio paths."""
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for split in ("train", "dev", "test"):
        rows = [
            json.loads(x)
            for x in (demo / f"results/corpora/demo/{split}.jsonl").read_text().splitlines()
        ]
        for r in rows:
            r["audio_filepath"] = str(demo / "results/corpora/demo" / r["audio_filepath"])
        out[split] = dest / f"{split}.jsonl"
        out[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def planted_config(manifests: dict[str, Path]) -> dict:
    return {
        "corpora": {
            "mine": {"source": "nemo", "manifests": {k: str(v) for k, v in manifests.items()}}
        }
    }


def edit(path: Path, line: int, **changes) -> None:
    lines = path.read_text().splitlines()
    row = json.loads(lines[line - 1])
    row.update(changes)
    lines[line - 1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def test_planted_validation_errors_stop_the_dag_naming_each_line(demo, tmp_path):
    manifests = copy_demo_manifests(demo, tmp_path / "manifests")
    train_speaker = json.loads(manifests["train"].read_text().splitlines()[0])["speaker"]
    edit(manifests["test"], 3, text="  ")
    dev_row = json.loads(manifests["dev"].read_text().splitlines()[4])
    edit(manifests["dev"], 5, duration=dev_row["duration"] + 1.0)
    edit(manifests["test"], 6, speaker=train_speaker)
    first_id = json.loads(manifests["train"].read_text().splitlines()[0])["utt_id"]
    edit(manifests["train"], 7, utt_id=first_id)
    write_config(tmp_path / "run", planted_config(manifests))

    proc = snakemake(tmp_path / "run", check=False)
    assert proc.returncode != 0
    log = (tmp_path / "run/logs/validate_corpus/mine.log").read_text()
    for where, what in [
        (f"{manifests['test']}:3", "empty transcript"),
        (f"{manifests['dev']}:5", "declared duration"),
        (f"{manifests['test']}:6", f"speaker {train_speaker!r} occurs in splits"),
        (f"{manifests['train']}:7", "ID already used"),
    ]:
        assert re.search(re.escape(where) + r" .*" + re.escape(what), log), (where, log)
    # a failed gate leaves nothing behind for downstream rules
    assert not (tmp_path / "run/results/data/mine/validated").exists()
    assert not (tmp_path / "run/results/data/mine/filtered").exists()


def test_missing_audio_stops_the_import_naming_the_line(demo, tmp_path):
    manifests = copy_demo_manifests(demo, tmp_path / "manifests")
    edit(manifests["dev"], 2, audio_filepath=str(tmp_path / "nowhere.wav"))
    write_config(tmp_path / "run", planted_config(manifests))
    proc = snakemake(tmp_path / "run", check=False)
    assert proc.returncode != 0
    log = (tmp_path / "run/logs/import_manifest/mine/dev.log").read_text()
    assert f"{manifests['dev']}:2: audio {tmp_path / 'nowhere.wav'} does not exist" in log
    assert not (tmp_path / "run/results/data/mine/imported/dev.jsonl.gz").exists()


def test_holdout_corpus_runs_and_keeps_speakers_apart(demo, tmp_path):
    manifests = copy_demo_manifests(demo, tmp_path / "manifests")
    everything = tmp_path / "manifests/all.jsonl"
    everything.write_text("".join(p.read_text() for p in manifests.values()))
    config = {
        "corpora": {
            "pooled": {
                "source": "nemo",
                "holdout": {
                    "manifest": str(everything),
                    "by": "speaker",
                    "fractions": {"dev": 0.15, "test": 0.15},
                    "seed": 3,
                },
            }
        }
    }
    write_config(tmp_path / "run", config)
    snakemake(tmp_path / "run")
    report = json.loads((tmp_path / "run/results/data/pooled/validation.json").read_text())
    assert report["ok"]
    assert sum(s["utterances"] for s in report["splits"].values()) == 72
    shutil.rmtree(tmp_path / "run/results/corpora", ignore_errors=True)


def test_a_copied_project_checks_its_own_audio(tmp_path, capsys):
    """Issue 30: after ``cp -a`` of a finished project, a dev WAV truncated in the copy was not
    seen (the records named the audio in the old location, unchanged there). Now the copy's
    records and cuts name the project's files relative to it: the truncation reruns the copy's
    dev import and the gate refuses the file; the original is untouched and up to date. Then,
    in the original, an intermediate edited so that it still parses stops the job reading it."""
    import subprocess
    import sys

    from tests.e2e import REPO, environment

    first, copy = tmp_path / "first", tmp_path / "copy"
    small = {**DEMO_CONFIG["corpora"]["demo"]["synthetic"], "num_utterances": 24}
    config = {
        "corpora": {"demo": {"source": "synthetic", "synthetic": small}},
        "tokenizers": DEMO_CONFIG["tokenizers"],
    }
    write_config(first, config)
    snakemake(first)
    shutil.copytree(first, copy, symlinks=True)  # cp -a: mtimes kept
    written = [*copy.glob("results/**/*.prov.json"), *copy.glob("results/data/*/audio_state/*")]
    leaks = [p for p in written if str(first) in p.read_text()]
    assert not leaks, f"records naming the original's files: {leaks}"
    cuts = load_cuts(copy / "results/data/demo/imported/dev.jsonl.gz")
    assert all(not os.path.isabs(c.recording.sources[0].source) for c in cuts)

    def status(workdir: Path) -> subprocess.CompletedProcess:
        args = ["--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml"]
        return subprocess.run(
            [sys.executable, "-m", "asrflow.cli", "status", "--", *args],
            cwd=workdir, capture_output=True, text=True, timeout=300, env=environment(),
        )  # fmt: skip

    assert "Nothing to be done" in (p := snakemake(copy, "-n")).stdout + p.stderr
    assert asrflow_main(["verify", str(copy / "results")]) == 0
    assert status(copy).returncode == 0

    row = json.loads((copy / "results/corpora/demo/dev.jsonl").read_text().splitlines()[0])
    wav = copy / "results/corpora/demo" / row["audio_filepath"]
    wav.write_bytes(wav.read_bytes()[: wav.stat().st_size // 2])
    rerun = {"import_manifest[corpus=demo, split=dev]", "validate_corpus[corpus=demo]"}
    planned = executed(snakemake(copy, "-n"))  # and what follows the gate, if it passed
    after = {f"filter_split[corpus=demo, split={s}]" for s in SPLITS}
    assert planned == rerun | after | {"train_tokenizer[tokenizer=demo_char]"}
    proc = snakemake(copy, check=False)
    assert proc.returncode != 0
    assert executed(proc) == rerun
    log = (copy / "logs/validate_corpus/demo.log").read_text()
    assert f"{row['utt_id']}: audio " in log and "is truncated: its header says" in log
    capsys.readouterr()
    assert asrflow_main(["verify", str(copy / "results")]) == 1
    out = capsys.readouterr().out
    assert f"{wav}: modified output (rule synthesize_corpus, output 'audio', in dir" in out
    assert str(first) not in out
    assert status(copy).returncode == 1
    # the original still has its whole file and nothing to do
    assert "Nothing to be done" in (p := snakemake(first, "-n")).stdout + p.stderr

    # an intermediate changed so that it still parses (a transcript edited in the filtered cuts)
    # is not trained on: the tokenizer stops before it starts, naming the file and its rule
    filtered = first / "results/data/demo/filtered/train.jsonl.gz"
    cuts = list(load_cuts(filtered))
    cuts[0].supervisions[0].text += " edited"
    save_cuts(cuts, filtered)
    proc = snakemake(first, check=False)
    assert proc.returncode != 0 and executed(proc) == {"train_tokenizer[tokenizer=demo_char]"}
    log = (first / "logs/train_tokenizer/demo_char.log").read_text()
    assert "results/data/demo/filtered/train.jsonl.gz: modified output (written by rule " in log
    assert "filter_split); expected " in log and "Delete it" in log and "a bug" not in log
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (first / "results/tokenizers/demo_char/bpe.model").exists()
