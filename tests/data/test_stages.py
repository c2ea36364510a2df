"""Tests for asrflow.data.stages: the data rules end to end on a tiny NeMo corpus (no Snakemake)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from asrflow.data.cuts import field, load_cuts, origin
from asrflow.data.stages import (
    filter_split,
    holdout_split,
    import_split,
    validate_corpus,
)
from asrflow.errors import ValidationFailed

OLD_NS = 10**18
SPLITS = ("train", "dev", "test")


def wavs(tmp_path: Path, prefix: str = "") -> list[str]:
    """Every audio file the nemo_corpus fixture wrote (optionally of one split)."""
    audio = (tmp_path / "corpus" / "audio").resolve()
    return sorted(str(p) for p in audio.glob(f"{prefix}*.wav"))


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def ids(path: Path) -> list[str]:
    return [c.id for c in load_cuts(path)]


def import_all(manifests: dict[str, Path], out: Path) -> dict[str, Path]:
    paths = {}
    for split, manifest in manifests.items():
        paths[split] = out / "imported" / f"{split}.jsonl.gz"
        import_split("nemo", manifest, paths[split], threads=2)
    return paths


def run_validate(
    split_paths: dict[str, Path], out: Path, threads: int = 2, **validation
) -> list[str]:
    return validate_corpus(
        "c",
        split_paths,
        out / "validated",
        out / "validation.json",
        out / "validation.txt",
        validation=validation,
        normalization={},
        threads=threads,
    )


def run_filter(cuts: Path, out: Path, split: str) -> None:
    filter_split(
        cuts,
        out / "filtered" / f"{split}.jsonl.gz",
        out / "filtered" / f"{split}.report.json",
        out / "filtered" / f"{split}.report.txt",
        filter={},
        slice_fields=["condition", "has_entity"],
        normalization={},
    )


# --- import ----------------------------------------------------------------------------------


def test_import_split_writes_cuts_and_returns_its_audio(nemo_corpus, tmp_path: Path) -> None:
    manifests = nemo_corpus()
    out = tmp_path / "out" / "imported" / "train.jsonl.gz"
    audio = import_split("nemo", manifests["train"], out, threads=2)
    assert audio == wavs(tmp_path, "train-")  # complete, sorted, absolute, train only
    assert len(audio) == 9
    assert all(Path(a).is_absolute() and Path(a).is_file() for a in audio)
    cuts = list(load_cuts(out))
    assert [c.id for c in cuts] == [f"train-{s}-{i}" for s in "abc" for i in range(3)]
    assert origin(cuts[2]) == f"{manifests['train']}:3"
    assert tree(tmp_path / "out") == ["imported", "imported/train.jsonl.gz"]


def test_audio_inside_the_project_is_named_relative_to_it(
    nemo_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30: a moved or copied project's cuts named the audio in the old location."""
    manifests = nemo_corpus()
    monkeypatch.chdir(tmp_path)  # the project root: the corpus lies inside it
    out = tmp_path / "out" / "dev.jsonl.gz"
    audio = import_split("nemo", manifests["dev"], out, threads=2)
    expected = [str(Path(a).relative_to(tmp_path.resolve())) for a in wavs(tmp_path, "dev-")]
    assert audio == expected and audio[0].startswith("corpus/audio/")
    assert sorted(c.recording.sources[0].source for c in load_cuts(out)) == expected
    assert all(c.load_audio().size for c in load_cuts(out))  # opened in the project root


def test_import_split_is_content_stable(nemo_corpus, tmp_path: Path) -> None:
    manifests = nemo_corpus()
    out = tmp_path / "dev.jsonl.gz"
    import_split("nemo", manifests["dev"], out)
    first = out.read_bytes()
    os.utime(out, ns=(OLD_NS, OLD_NS))
    import_split("nemo", manifests["dev"], out)
    assert out.read_bytes() == first
    assert out.stat().st_mtime_ns == OLD_NS  # a rerun with the same manifest changes nothing


# --- import -> validate -> filter ------------------------------------------------------------


def test_import_validate_filter(nemo_corpus, tmp_path: Path) -> None:
    def mutate(rows):
        rows["train"][0]["text"] = "x" * 40  # 40 chars in 1 s: too many chars per second

    manifests = nemo_corpus(mutate)
    out = tmp_path / "out"
    imported = import_all(manifests, out)

    audio = run_validate(imported, out)
    assert audio == wavs(tmp_path)  # every split's audio
    assert len(audio) == 15
    assert sorted(p.name for p in (out / "validated").iterdir()) == [
        f"{s}.jsonl.gz" for s in sorted(SPLITS)
    ]
    for split in SPLITS:  # validated cuts are the imported cuts, byte for byte
        assert (out / "validated" / f"{split}.jsonl.gz").read_bytes() == imported[
            split
        ].read_bytes()
    report = json.loads((out / "validation.json").read_text())
    assert report["ok"] is True
    assert report["corpus"] == "c"
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {
        "train": 9,
        "dev": 3,
        "test": 3,
    }
    assert "PASSED" in (out / "validation.txt").read_text()

    for split in SPLITS:
        run_filter(out / "validated" / f"{split}.jsonl.gz", out, split)
    assert tree(out / "filtered") == sorted(
        f"{s}{ext}" for s in SPLITS for ext in (".jsonl.gz", ".report.json", ".report.txt")
    )
    assert ids(out / "filtered" / "train.jsonl.gz") == [
        f"train-{s}-{i}" for s in "abc" for i in range(3) if (s, i) != ("a", 0)
    ]
    assert len(ids(out / "filtered" / "dev.jsonl.gz")) == 3
    train_report = json.loads((out / "filtered" / "train.report.json").read_text())
    assert train_report["input"] == 9
    assert train_report["kept"] == 8
    assert train_report["removed_ids"]["too_many_chars_per_second"] == ["train-a-0"]
    assert train_report["removed_by_slice"]["condition"] == {"clean": 1}
    dev_report = json.loads((out / "filtered" / "dev.report.json").read_text())
    assert dev_report["removed"] == 0
    assert (out / "filtered" / "train.report.txt").read_text().strip()


def test_validate_corpus_with_lower_tolerance_still_passes(nemo_corpus, tmp_path: Path) -> None:
    """The fixture's audio lasts exactly as declared; settings reach the validator."""
    out = tmp_path / "out"
    imported = import_all(nemo_corpus(), out)
    run_validate(imported, out, duration_tolerance=0.0, full_decode=True)
    report = json.loads((out / "validation.json").read_text())
    assert report["config"]["duration_tolerance"] == 0.0
    assert report["config"]["full_decode"] is True


def test_validation_outputs_do_not_depend_on_the_thread_count(nemo_corpus, tmp_path) -> None:
    """Issue 12, item 9: `-c1` and `-c2` wrote different validation.json (the thread count)."""
    imported = import_all(nemo_corpus(), tmp_path / "in")
    for threads in (1, 3):
        run_validate(imported, tmp_path / f"t{threads}", threads=threads, full_decode=True)
    for name in ("validation.json", "validation.txt", "validated/train.jsonl.gz"):
        assert (tmp_path / "t1" / name).read_bytes() == (tmp_path / "t3" / name).read_bytes()
    assert "threads" not in json.loads((tmp_path / "t1/validation.json").read_text())["config"]


def test_a_dev_of_training_speakers_is_a_warning_in_the_report_and_the_log(
    nemo_corpus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31, item 2: dev holds takes of train speakers only, test new ones: the job goes on,
    and its JSON, text and log say so (the log once)."""
    speakers = {"train": ["a", "b", "c"], "dev": ["a", "b"], "test": ["e"]}
    out = tmp_path / "out"
    imported = import_all(nemo_corpus(speakers=speakers), out)
    with caplog.at_level("INFO", logger="asrflow"):
        run_validate(imported, out, allow_group_overlap=["speaker", "session"])
    report = json.loads((out / "validation.json").read_text())
    assert report["ok"] is True and report["warnings_by_code"] == {"dev_seen_groups": 1}
    assert report["dev_groups"]["measures"] == "seen speakers only"
    assert report["dev_groups"]["unseen"] == {"test": 1}
    assert report["groups"]["dev"]["speaker"] == ["a", "b"]
    message = report["dev_groups"]["message"]
    assert report["warnings"][0]["message"] == message
    assert (out / "validation.txt").read_text().count(message) == 1
    assert caplog.text.count(message) == 1
    assert (out / "validated" / "dev.jsonl.gz").is_file()


def test_validate_corpus_fails_and_writes_nothing(nemo_corpus, tmp_path: Path) -> None:
    def mutate(rows):
        rows["test"][1]["text"] = ""

    manifests = nemo_corpus(mutate)
    imported = import_all(manifests, tmp_path / "in")
    out = tmp_path / "out"
    with pytest.raises(ValidationFailed) as err:
        run_validate(imported, out)
    message = str(err.value)
    assert f"{manifests['test']}:2" in message
    assert "empty transcript" in message
    assert not out.exists()  # no report, no validated dir, not even the parent


def test_validate_corpus_failure_keeps_existing_outputs_untouched(
    nemo_corpus, tmp_path: Path
) -> None:
    """A failed run neither deletes nor half-rewrites what an earlier run wrote."""
    good = nemo_corpus()
    out = tmp_path / "out"
    run_validate(import_all(good, tmp_path / "good"), out)
    before = {p: (out / p).read_bytes() for p in tree(out) if (out / p).is_file()}

    def mutate(rows):
        rows["dev"][0]["speaker"] = "a"  # speaker a also in train

    bad = import_all(nemo_corpus(mutate), tmp_path / "bad")
    with pytest.raises(ValidationFailed, match=r"speaker .a. occurs in splits dev, train"):
        run_validate(bad, out)
    assert {p: (out / p).read_bytes() for p in tree(out) if (out / p).is_file()} == before


# --- holdout ---------------------------------------------------------------------------------


def test_holdout_split_disjoint_speakers(nemo_corpus, tmp_path: Path) -> None:
    manifests = nemo_corpus(speakers={"all": ["a", "b", "c", "d", "e", "f", "g"]})
    out = tmp_path / "out"
    all_cuts = out / "imported" / "all.jsonl.gz"
    audio = import_split("nemo", manifests["all"], all_cuts)
    assert audio == wavs(tmp_path)
    assert len(audio) == 21

    fractions = {"dev": 0.15, "test": 0.15}
    holdout_split(all_cuts, out / "holdout", {"by": "speaker", "fractions": fractions, "seed": 0})
    assert sorted(p.name for p in (out / "holdout").iterdir()) == [
        "dev.jsonl.gz",
        "test.jsonl.gz",
        "train.jsonl.gz",
    ]
    parts = {s: list(load_cuts(out / "holdout" / f"{s}.jsonl.gz")) for s in SPLITS}
    speakers = {s: {field(c, "speaker") for c in cuts} for s, cuts in parts.items()}
    assert all(speakers.values())
    assert not speakers["train"] & speakers["dev"]
    assert not speakers["train"] & speakers["test"]
    assert not speakers["dev"] & speakers["test"]
    assert sorted(c.id for cuts in parts.values() for c in cuts) == sorted(ids(all_cuts))
    assert len(parts["train"]) > len(parts["dev"])
    # origins still name the line of the single source manifest
    assert all(origin(c).startswith(f"{manifests['all']}:") for c in parts["dev"])

    # holdout output feeds validation, which then passes and returns every audio file
    validated = run_validate({s: out / "holdout" / f"{s}.jsonl.gz" for s in SPLITS}, out)
    assert validated == audio


def test_holdout_split_with_the_schema_defaults_is_reproducible(nemo_corpus, tmp_path) -> None:
    from asrflow.settings import with_defaults

    manifests = nemo_corpus(speakers={"all": ["a", "b", "c", "d", "e"]})
    all_cuts = tmp_path / "all.jsonl.gz"
    import_split("nemo", manifests["all"], all_cuts)
    corpus = {"source": "nemo", "holdout": {"manifest": str(manifests["all"])}}
    holdout = with_defaults({"corpora": {"c": corpus}})["corpora"]["c"]["holdout"]
    assert holdout == {**holdout, "by": "speaker", "seed": 0}
    holdout_split(all_cuts, tmp_path / "h1", holdout)
    holdout_split(all_cuts, tmp_path / "h2", holdout)
    for split in SPLITS:
        assert (tmp_path / "h1" / f"{split}.jsonl.gz").read_bytes() == (
            tmp_path / "h2" / f"{split}.jsonl.gz"
        ).read_bytes()


def test_holdout_split_by_session_keeps_sessions_whole(nemo_corpus, tmp_path: Path) -> None:
    manifests = nemo_corpus(speakers={"all": ["a", "b", "c"]})
    all_cuts = tmp_path / "all.jsonl.gz"
    import_split("nemo", manifests["all"], all_cuts)
    holdout_split(
        all_cuts, tmp_path / "h", {"by": "session", "fractions": {"eval": 0.2}, "seed": 3}
    )
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == [
        "eval.jsonl.gz",
        "train.jsonl.gz",
    ]
    sessions = {
        s: {field(c, "session") for c in load_cuts(tmp_path / "h" / f"{s}.jsonl.gz")}
        for s in ("train", "eval")
    }
    assert sessions["eval"] and sessions["train"]
    assert not sessions["train"] & sessions["eval"]
