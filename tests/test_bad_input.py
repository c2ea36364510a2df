"""The bad-input catalogue (issue 12): every fault a user can plant in a corpus or a config, run
through the real rules on a tiny corpus (marked slow).

Each :class:`Case` plants one fault in one line (or file) of a small NeMo (or Kaldi) corpus.
Faults that one rule reports together (every bad line of a manifest, every validation error of a
corpus) share a corpus, each on its own line, so the whole catalogue is nine corpora of one
workflow run with ``--keep-going``, each up to the first rule that must refuse it (or warn). For
each case the test asserts:

- the rule fails (or, for a warning, succeeds and reports it);
- its log names the manifest and line (or the file or config key) and says what to do;
- nothing of the failing rule's outputs remains;
- the console shows no Python traceback for it (a user error is a message, not a crash).

Config faults stop the workflow before any job runs; each is one dry run. Training-time faults
(NaN audio, a misfit init package, a token list that does not match its tokenizer, damaged
checkpoints, a disk that fills) run through the training rules of a second workflow of three
tiny runs, those planted after training each on a private copy of it. docs/validation.md lists this
catalogue.
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import yaml

from tests.conftest import utterance_rows, write_wav
from tests.e2e import REPO, copy_workdir, environment, snakemake, snakemake_command, write_config

pytestmark = pytest.mark.slow

SPLITS = {"train": ["a", "b", "c", "f"], "dev": ["d", "e", "g"]}
"""12 train and 9 dev utterances of 1.0, 1.25 and 1.5 s (see tests.conftest.utterance_rows)."""
RATE = 16000


class Corpus:
    """One case's copy of the base corpus: rows per split, its own audio where it changes any."""

    def __init__(self, root: Path, audio: Path) -> None:
        self.root = root
        self.shared_audio = audio
        self.rows = {s: utterance_rows(s, spk, audio_dir=str(audio)) for s, spk in SPLITS.items()}
        self.raw: dict[str, bytes] = {}
        self.lines: dict[tuple[str, int], bytes] = {}  # (split, index) -> the line's bytes
        self.prefix: dict[str, bytes] = {}
        self.source = "nemo"
        self.config: dict[str, Any] = {}

    def manifest(self, split: str) -> Path:
        return self.root / f"{split}.jsonl"

    def own_audio(self, split: str, index: int) -> Path:
        """A private copy of one row's audio (to damage), with the row pointing at it."""
        row = self.rows[split][index]
        src = Path(row["audio_filepath"])
        dest = self.root / "audio" / src.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        row["audio_filepath"] = str(dest)
        return dest

    def write(self) -> dict[str, str]:
        self.root.mkdir(parents=True, exist_ok=True)
        out = {}
        for split, rows in self.rows.items():
            path = self.manifest(split)
            data = self.raw.get(split)
            if data is None:
                lines = [
                    self.lines.get((split, i), json.dumps(r).encode()) for i, r in enumerate(rows)
                ]
                data = self.prefix.get(split, b"") + b"".join(line + b"\n" for line in lines)
            path.write_bytes(data)
            out[split] = str(path)
        return out


@dataclass
class Case:
    """One planted fault and what the user must be told."""

    name: str
    group: str  # the corpus it is planted in (with the other faults of its group)
    rule: str  # import_manifest | validate_corpus | filter_split
    plant: Callable[[Corpus], None]
    says: tuple[str, ...]  # regular expressions the rule's log must match
    line: tuple[str, int] | None = None  # (split, line) the message must name
    split: str = "dev"  # the split whose job fails (per-split rules)
    warning: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # corpus config keys


# --- planting helpers -------------------------------------------------------------------------


def edit(split: str, index: int, **changes: Any) -> Callable[[Corpus], None]:
    return lambda c: c.rows[split][index].update(changes)


def raw_line(split: str, index: int, line: bytes) -> Callable[[Corpus], None]:
    return lambda c: c.lines.__setitem__((split, index), line)


def transform_line(
    split: str, index: int, fn: Callable[[bytes], bytes]
) -> Callable[[Corpus], None]:
    return lambda c: c.lines.__setitem__(
        (split, index), fn(json.dumps(c.rows[split][index]).encode())
    )


def truncate_audio(c: Corpus) -> None:
    """Keep 0.5 s of a 1.25 s file and make the manifest agree with what is left."""
    wav = c.own_audio("train", 7)
    wav.write_bytes(wav.read_bytes()[: 44 + 2 * RATE // 2])
    c.rows["train"][7]["duration"] = 0.5


def header_only(c: Corpus) -> None:
    wav = c.own_audio("train", 8)
    head = bytearray(wav.read_bytes()[:44])
    head[4:8] = (36).to_bytes(4, "little")
    head[40:44] = bytes(4)
    wav.write_bytes(bytes(head))


def at_rate(rate: int, index: int) -> Callable[[Corpus], None]:
    def plant(c: Corpus) -> None:
        wav = c.own_audio("train", index)
        write_wav(wav, c.rows["train"][index]["duration"], sr=rate)

    return plant


def corrupt_flac(c: Corpus) -> None:
    row = c.rows["train"][9]
    data, sr = soundfile.read(row["audio_filepath"], dtype="int16")
    flac = c.root / "audio" / "train-9.flac"
    flac.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(flac, data, sr, format="FLAC")
    raw = bytearray(flac.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 400] = bytes(400)
    flac.write_bytes(bytes(raw))
    row["audio_filepath"] = str(flac)


def nan_samples(c: Corpus) -> None:
    wav = c.own_audio("train", 10)
    frames = round(c.rows["train"][10]["duration"] * RATE)
    samples = np.random.default_rng(0).standard_normal(frames).astype(np.float32) * 0.1
    samples[RATE // 2] = np.nan
    soundfile.write(wav, samples, RATE, subtype="FLOAT")


def write_bytes(index: int, name: str, data: bytes) -> Callable[[Corpus], None]:
    def plant(c: Corpus) -> None:
        path = c.root / "audio" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        c.rows["train"][index]["audio_filepath"] = str(path)

    return plant


def both(*plants: Callable[[Corpus], None]) -> Callable[[Corpus], None]:
    def plant(c: Corpus) -> None:
        for p in plants:
            p(c)

    return plant


def kaldi(tables: dict[str, str], rate: int = RATE, declared: int | None = None):
    """A Kaldi corpus (train and dev data dirs) whose dev tables are ``tables``; ``{a}`` in a
    table stands for an audio file at ``rate``."""

    def plant(c: Corpus) -> None:
        c.source = "kaldi"
        if declared:
            c.config["sampling_rate"] = declared
        for split, spk in (("train", "s1"), ("dev", "s2")):
            d = c.root / f"kaldi_{split}"
            d.mkdir(parents=True, exist_ok=True)
            wav = write_wav(c.root / f"{split}.wav", 1.0, sr=rate if split == "dev" else RATE)
            given = tables if split == "dev" else {}
            (d / "wav.scp").write_text(given.get("wav.scp", "r1 {a}\n").format(a=wav))
            text = given.get("text", "r1 hello there\n")
            (d / "text").write_bytes(text.encode("latin-1") if "\xe9" in text else text.encode())
            (d / "utt2spk").write_text(f"r1 {spk}\n")

    return plant


def empty_manifest(c: Corpus) -> None:
    c.raw["dev"] = b""


def every_dev_text_too_long(c: Corpus) -> None:
    for row in c.rows["dev"]:
        row["text"] = "a very long transcript " * 12


def bom(c: Corpus) -> None:
    c.prefix["dev"] = b"\xef\xbb\xbf"


def mixed_case(c: Corpus) -> None:
    for row in c.rows["train"][:3]:
        row["text"] = row["text"].upper()


def digits(c: Corpus) -> None:
    c.rows["train"][3]["text"] = "hello b number 0"


IMPORT, KALDI, VALID, WARN = "import_lines", "kaldi_lines", "validation_lines", "warnings"
CASES = [
    # import: a line that cannot become a cut (dev), audio that cannot be opened (train)
    Case("json", IMPORT, "import_manifest", raw_line("dev", 0, b'{"audio_filepath": "x.wav",'),
         (r"not valid JSON at column \d+", "Fix these lines"), ("dev", 1)),
    Case("not_object", IMPORT, "import_manifest", raw_line("dev", 1, b"[1, 2]"),
         ("a line must be a JSON object",), ("dev", 2)),
    Case("missing_key", IMPORT, "import_manifest",
         transform_line("dev", 2, lambda b: re.sub(rb', "text": "[^"]*"', b"", b)),
         (r"missing key\(s\) text",), ("dev", 3)),
    Case("duration_text", IMPORT, "import_manifest", edit("dev", 3, duration="long"),
         ("duration/offset must be numbers",), ("dev", 4)),
    Case("latin1", IMPORT, "import_manifest",
         transform_line("dev", 4, lambda b: b.replace(b'"hello', b'"h\xe9llo')),
         (r"not UTF-8: byte 0xe9 at column \d+", "iconv"), ("dev", 5)),
    Case("negative_offset", IMPORT, "import_manifest", edit("dev", 5, offset=-0.5),
         (r"offset must not be negative \(got -0.5\)",), ("dev", 6)),
    Case("missing_audio", IMPORT, "import_manifest",
         edit("train", 0, audio_filepath="/nowhere/x.wav"),
         ("audio /nowhere/x.wav does not exist", "Fix the paths or remove the lines"),
         ("train", 1), split="train"),
    Case("garbage_audio", IMPORT, "import_manifest",
         write_bytes(1, "junk.wav", b"this is not audio" * 50),
         (r"junk.wav cannot be opened",), ("train", 2), split="train"),
    Case("zero_byte_audio", IMPORT, "import_manifest", write_bytes(2, "empty.wav", b""),
         (r"empty.wav is an empty file \(0 bytes\)",), ("train", 3), split="train"),
    Case("kaldi_pipe", KALDI, "import_manifest",
         kaldi({"wav.scp": "r1 sox {a} -t wav - |\nr2\nr1 {a}\n",
                "text": "r1 hello there\nr3 hi\n"}),
         (r"wav.scp:1: recording r1 is a pipe command", "convert piped audio to files")),
    Case("kaldi_recording_twice", KALDI, "import_manifest", lambda c: None,
         (r"wav.scp:3: recording r1 is listed twice in wav.scp, at lines 1 and 3",
          "validate_data_dir.sh")),
    Case("kaldi_text_of_no_recording", KALDI, "import_manifest", lambda c: None,
         (r"text:2: utterance r3 is not a recording in wav.scp",)),
    Case("kaldi_no_path", KALDI, "import_manifest", lambda c: None,
         (r"wav.scp:2: expected '<recording-id> <path>'",)),
    Case("kaldi_latin1", "kaldi_encoding", "import_manifest", kaldi({"text": "r1 caf\xe9\n"}),
         (r"text:1: not UTF-8: byte 0xe9 at column 7", "iconv")),
    # validation: the corpus imports, the gate refuses it (all in one corpus, a line each)
    Case("empty_text", VALID, "validate_corpus", edit("dev", 0, text=""),
         ("empty transcript", "write the transcript or remove the line"), ("dev", 1)),
    Case("blank_text", VALID, "validate_corpus", edit("dev", 1, text="  \t "),
         ("empty transcript",), ("dev", 2)),
    Case("null_text", VALID, "validate_corpus", edit("dev", 2, text=None),
         ("empty transcript",), ("dev", 3)),
    Case("duration_long", VALID, "validate_corpus", edit("dev", 3, duration=2.25),
         ("declared duration 2.250 s but the audio lasts 1.000 s", "correct the duration"),
         ("dev", 4)),
    Case("duration_short", VALID, "validate_corpus", edit("train", 2, duration=1.0),
         ("declared duration 1.000 s but the audio lasts 1.500 s",), ("train", 3)),
    Case("negative_duration", VALID, "validate_corpus", edit("dev", 4, duration=-1.0),
         ("declared duration -1.000 s",), ("dev", 5)),
    Case("duplicate_id", VALID, "validate_corpus", edit("train", 3, utt_id="train-a-0"),
         ("ID already used at", "give every utterance a unique ID"), ("train", 4)),
    Case("duplicate_id_across", VALID, "validate_corpus", edit("dev", 5, utt_id="train-a-1"),
         ("ID already used at",), ("dev", 6)),
    Case("audio_two_splits", VALID, "validate_corpus",
         lambda c: c.rows["dev"][6].update(
             audio_filepath=c.rows["train"][5]["audio_filepath"], duration=1.5),
         ("is also used in split train", "keep each recording in one split"), ("dev", 7)),
    Case("audio_two_ids", VALID, "validate_corpus",
         lambda c: c.rows["train"][4].update(
             audio_filepath=c.rows["train"][0]["audio_filepath"], duration=1.0),
         (r"is also utterance train-a-0 \(\S+:1\), with another transcript",
          "one audio has one transcript"), ("train", 5)),
    Case("speaker_two_splits", VALID, "validate_corpus", edit("dev", 7, speaker="a"),
         ("speaker 'a' occurs in splits dev, train", "allow_group_overlap"), ("dev", 8)),
    Case("session_two_splits", VALID, "validate_corpus", edit("dev", 8, session="b_s1"),
         ("session 'b_s1' occurs in splits",), ("dev", 9)),
    Case("segment_outside", VALID, "validate_corpus", edit("train", 6, offset=1.0),
         ("lies beyond the end of the audio", "correct offset/duration"), ("train", 7)),
    Case("truncated_wav", VALID, "validate_corpus", truncate_audio,
         (r"is truncated: its header says 20000 frames, the file holds 8000",
          "copy it again from its source"), ("train", 8)),
    Case("header_only_wav", VALID, "validate_corpus", header_only,
         ("holds no samples", "not the manifest line"), ("train", 9)),
    Case("corrupt_flac_full_decode", VALID, "validate_corpus", corrupt_flac,
         (r"train-9.flac cannot be read",), ("train", 10),
         extra={"validation": {"full_decode": True}}),
    Case("nan_samples_full_decode", VALID, "validate_corpus", nan_samples,
         (r"train-f-1.wav holds non-finite samples \(NaN or inf\) from 0.500 s",),
         ("train", 11)),
    Case("rate_declared", VALID, "validate_corpus", at_rate(8000, 11),
         (r"is 8000 Hz but corpora.\w+.sampling_rate declares 16000 Hz", "sox"), ("train", 12),
         extra={"sampling_rate": 16000}),
    Case("kaldi_rate", "kaldi_rate", "validate_corpus", kaldi({}, rate=8000),
         (r"is 8000 Hz but the manifest reads it as 16000 Hz",
          r"declare corpora.\w+.sampling_rate: 8000")),
    Case("kaldi_rate_declared", "kaldi_declared", "validate_corpus",
         kaldi({}, rate=8000, declared=16000),
         (r"is 8000 Hz but corpora.\w+.sampling_rate declares 16000 Hz",)),
    Case("empty_split", "empty_split", "validate_corpus", empty_manifest,
         ("split 'dev' has 0 utterances", r"is \S*/dev\.jsonl empty, or every line",
          "remove the split")),
    # filtering: every utterance of a split removed
    Case("filter_empties_split", "filter", "filter_split", every_dev_text_too_long,
         ("the filter removed all 9 utterances of split", "too_many_chars_per_second",
          r"Loosen corpora.\w+.filter")),
    # warnings: the job succeeds and the report (or log) says it
    Case("bom", WARN, "import_manifest", bom, ("byte-order mark",), warning=True),
    Case("mixed_rates", WARN, "validate_corpus", at_rate(8000, 4),
         ("the audio has 2 sampling rates: 8000 Hz: 1", "resampled"), warning=True),
    Case("mixed_case", WARN, "validate_corpus", mixed_case, ("are all upper case",),
         warning=True),
    Case("digits_and_words", WARN, "validate_corpus", digits,
         ("write numbers as digits",), warning=True),
    Case("audio_repeated", WARN, "validate_corpus",
         lambda c: c.rows["train"][5].update(
             {k: c.rows["train"][6][k] for k in ("audio_filepath", "duration", "text")}),
         (r"utterance train-c-0: audio \S+ \(0.000-1.000 s\) is also utterance train-b-2 "
          r"\(\S+:6\), with the same transcript",), warning=True),
    Case("unseen_characters", WARN, "validate_corpus", lambda c: None,
         ("occur in dev but never in train",), warning=True),
]  # fmt: skip
GROUPS = list(dict.fromkeys(c.group for c in CASES))


def _log(workdir: Path, case: Case) -> Path:
    corpus = case.group
    if case.rule == "validate_corpus":
        return workdir / f"logs/validate_corpus/{corpus}.log"
    return workdir / f"logs/{case.rule}/{corpus}/{case.split}.log"


def _outputs(workdir: Path, case: Case) -> list[Path]:
    """What the failing job would have written."""
    data = workdir / "results/data" / case.group
    if case.rule == "import_manifest":
        return [data / f"imported/{case.split}.jsonl.gz"]
    if case.rule == "validate_corpus":
        return [data / "validated", data / "validation.json", data / "validation.txt"]
    return [data / f"filtered/{case.split}.jsonl.gz", data / f"filtered/{case.split}.report.json"]


def _target(case: Case) -> str:
    data = f"results/data/{case.group}"
    if case.rule == "import_manifest":
        return f"{data}/imported/{case.split}.jsonl.gz"
    if case.rule == "validate_corpus":
        return f"{data}/validation.json"
    return f"{data}/filtered/{case.split}.jsonl.gz"


def _base_audio(audio: Path) -> Path:
    """The base corpus's WAVs (every case shares them unless it damages its own copy)."""
    for split, speakers in SPLITS.items():
        for k, row in enumerate(utterance_rows(split, speakers, audio_dir=str(audio))):
            write_wav(Path(row["audio_filepath"]), row["duration"], seed=k)
    return audio


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory) -> tuple[Path, dict[str, Corpus], str]:
    """Every case as a corpus of one workflow, run once with --keep-going."""
    root = tmp_path_factory.mktemp("catalogue")
    audio = _base_audio(root / "audio")
    corpora: dict[str, Corpus] = {}
    config: dict[str, Any] = {}
    for case in CASES:
        corpus = corpora.setdefault(case.group, Corpus(root / "corpora" / case.group, audio))
        case.plant(corpus)
        corpus.config.update(case.extra)
    for name, corpus in corpora.items():
        manifests = corpus.write()
        if corpus.source == "kaldi":
            manifests = {s: str(corpus.root / f"kaldi_{s}") for s in SPLITS}
        config[name] = {"source": corpus.source, "manifests": manifests, **corpus.config}
    workdir = root / "run"
    write_config(workdir, {"corpora": config})
    targets = dict.fromkeys(_target(c) for c in CASES)
    proc = snakemake(workdir, "--keep-going", *targets, check=False)
    return workdir, corpora, proc.stdout + proc.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_fault_is_named_and_leaves_nothing(catalogue, case: Case) -> None:
    workdir, corpora, console = catalogue
    log = _log(workdir, case).read_text()
    for pattern in case.says:
        assert re.search(pattern, log), f"{case.name}: {pattern!r} not in\n{log[-3000:]}"
    if case.line is not None:
        split, line = case.line
        assert f"{corpora[case.group].manifest(split)}:{line}" in log, log[-3000:]
    outputs = _outputs(workdir, case)
    if case.warning:
        assert "ERROR" not in log, log[-3000:]
        assert all(p.exists() for p in outputs[:1]), f"{case.name}: the job must succeed"
        return
    assert f"rule {case.rule} failed: " in log, log[-3000:]
    assert log.count(f"rule {case.rule} failed") == 1
    assert "a bug" not in log
    left = [p for p in outputs if p.exists()]
    assert not left, f"{case.name}: the failed rule left {left}"
    assert "Traceback" not in console, "a user error must not print a traceback"


# --- faults found after a step ran -------------------------------------------------------------


def test_an_intermediate_damaged_after_it_was_written_is_named(catalogue, tmp_path) -> None:
    """A flipped byte in filtered/train.jsonl.gz: the tokenizer names the file and the fix."""
    _, corpora, _ = catalogue
    run = tmp_path / "run"
    config = {
        "corpora": {"ok": {"source": "nemo", "manifests": corpora[WARN].write()}},
        "tokenizers": {"tok": {"corpus": "ok", "model_type": "char"}},
    }
    write_config(run, config)
    snakemake(run, "results/data/ok/filtered/train.jsonl.gz")
    target = run / "results/data/ok/filtered/train.jsonl.gz"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x10
    target.write_bytes(bytes(data))
    proc = snakemake(run, check=False)
    assert proc.returncode != 0
    log = (run / "logs/train_tokenizer/tok.log").read_text()
    assert "results/data/ok/filtered/train.jsonl.gz: modified output (written by rule " in log
    assert "changed after it was written" in log and "asrflow verify" in log
    assert "a bug" not in log and "Traceback" not in proc.stdout + proc.stderr
    assert not (run / "results/tokenizers/tok/bpe.model").exists()


# --- config faults: the workflow stops before any job ------------------------------------------


def _config_fault(tmp_path: Path, config: dict[str, Any]) -> str:
    write_config(tmp_path, config)
    proc = snakemake(tmp_path, "-n", check=False)
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def _nemo(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    (tmp_path / "m").mkdir(parents=True, exist_ok=True)
    manifests = {}
    for split in ("train", "dev"):
        manifests[split] = str(tmp_path / "m" / f"{split}.jsonl")
        Path(manifests[split]).write_text("")
    return {"corpora": {"mine": {"source": "nemo", "manifests": manifests, **extra}}}


@pytest.mark.parametrize(
    "change, says",
    [
        ({"sampling_rte": 16000}, "config, corpora.mine: unknown key(s) 'sampling_rte'"),
        ({"sampling_rate": "16k"}, "config, corpora.mine.sampling_rate: '16k' is not of type"),
        ({"validation": {"full_decode": "yes"}}, "corpora.mine.validation.full_decode: 'yes'"),
    ],
)
def test_a_bad_config_key_is_one_line_naming_it(tmp_path, change, says) -> None:
    console = _config_fault(tmp_path, _nemo(tmp_path, **change))
    assert says in console, console
    assert len(console.splitlines()) < 12, console  # not the schema


def test_a_run_naming_an_unknown_tokenizer_is_named(tmp_path) -> None:
    config = _nemo(tmp_path)
    config["runs"] = {"r": {"corpora": ["mine"], "tokenizer": "nope", "recipe": "demo_conformer"}}
    console = _config_fault(tmp_path, config)
    assert "config, runs.r.tokenizer: unknown tokenizer 'nope'" in console, console


@pytest.mark.parametrize(
    "change, overrides, says",
    [
        (
            {"encoder": "conformerr"},
            {},
            "config, config/recipes/mine.yaml (run r): encoder: ESPnet has no encoder named "
            "'conformerr' (did you mean conformer?); its encoder names are conformer, transformer",
        ),
        (
            {},
            {"trainer": {"max_stepz": 10}},
            "config, run r: unknown key(s) runs.r.overrides.trainer.max_stepz; known keys of",
        ),
    ],
)
def test_a_bad_recipe_or_override_is_one_line_before_the_dag(tmp_path, change, overrides, says):
    """Issue 30: a recipe error stopped the DAG inside rule validate_corpus (whose params read
    every run's recipe) with a traceback, and an override's was blamed on the recipe file; a
    misspelt ESPnet encoder passed until the smoke run, as a bug."""
    recipe = yaml.safe_load((REPO / "config/recipes/demo_conformer.yaml").read_text())
    (tmp_path / "config/recipes").mkdir(parents=True)
    (tmp_path / "config/recipes/mine.yaml").write_text(yaml.safe_dump({**recipe, **change}))
    config = _nemo(tmp_path)
    config["tokenizers"] = {"t": {"corpus": "mine"}}
    run = {"corpora": ["mine"], "tokenizer": "t", "recipe": "mine", "overrides": overrides}
    config["runs"] = {"r": run}
    console = _config_fault(tmp_path, config)
    assert says in console, console
    assert "validate_corpus" not in console and "Traceback" not in console, console
    assert len(console.splitlines()) < 12, console


def test_a_missing_manifest_is_named_before_anything_runs(tmp_path) -> None:
    config = _nemo(tmp_path)
    Path(config["corpora"]["mine"]["manifests"]["dev"]).unlink()
    console = _config_fault(tmp_path, config)
    assert "Missing input files" in console and str(tmp_path / "m/dev.jsonl") in console


# --- training-time faults: the same corpus, trained through the rules ---------------------------
#
# One workflow trains four tiny runs (tests.train.tiny_run's 4-step recipe) on the catalogue's
# base corpus: `good` (clean audio), `nan` (a float WAV with a NaN sample; full_decode is off, so
# the loader is what meets it) and `misfit` (good's exported package as init, made wider by an
# override); `tuned` fine-tunes that package with a recipe of another width (which gives way).
# The faults planted after a run finished (a damaged last.ckpt, a disk that fills, an edited token
# list) each work on a private copy of that workdir.

NAN_INDEX = 10  # train-f-1.wav (tests.conftest.utterance_rows)


def _tiny_recipe(output_size: int = 16) -> dict[str, Any]:
    from tests.train.tiny_run import TINY_RECIPE

    recipe = json.loads(json.dumps(TINY_RECIPE))
    recipe["encoder_conf"]["output_size"] = output_size
    return recipe


def _summary(run: str) -> str:
    return f"results/runs/{run}/train/summary.json"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict[str, Corpus], str]:
    root = tmp_path_factory.mktemp("training")
    audio = _base_audio(root / "audio")
    corpora = {"clean": Corpus(root / "corpora/clean", audio)}
    corpora["nan_audio"] = Corpus(root / "corpora/nan_audio", audio)
    nan_samples(corpora["nan_audio"])
    workdir = root / "run"
    run = {"resources": {"cpus_per_device": 1}}
    config = {
        "corpora": {n: {"source": "nemo", "manifests": c.write()} for n, c in corpora.items()},
        "tokenizers": {f"{n}_char": {"corpus": n, "model_type": "char"} for n in corpora},
        "runs": {
            "good": {"corpora": ["clean"], "tokenizer": "clean_char", "recipe": "tiny", **run},
            "nan": {"corpora": ["nan_audio"], "tokenizer": "nan_audio_char", "recipe": "tiny"},
            # the model is good's package's; the override makes it wider
            "misfit": {
                "corpora": ["clean"],
                "tokenizer": "clean_char",
                "recipe": "tiny",
                "init": {"model": "results/runs/good/export/last"},
                "overrides": {"encoder_conf": {"output_size": 24}},
                **run,
            },
            # a recipe of another width: its model keys give way to the package's
            "tuned": {
                "corpora": ["clean"],
                "tokenizer": "clean_char",
                "recipe": "wider",
                "init": {"model": "results/runs/good/export/last"},
                **run,
            },
        },
    }
    write_config(workdir, config)
    recipes = workdir / "config/recipes"
    recipes.mkdir(parents=True)
    (recipes / "tiny.yaml").write_text(yaml.safe_dump(_tiny_recipe()))
    (recipes / "wider.yaml").write_text(yaml.safe_dump(_tiny_recipe(output_size=24)))
    targets = [_summary("good"), "results/runs/good/export/last", _summary("nan")]
    targets += [_summary("misfit"), _summary("tuned")]
    proc = snakemake(workdir, "--keep-going", *targets, check=False)
    return workdir, corpora, proc.stdout + proc.stderr


def _failed(workdir: Path, rule: str, run: str) -> str:
    log = (workdir / f"logs/{rule}/{run}.log").read_text()
    assert f"rule {rule} failed: " in log, log[-3000:]
    assert "a bug" not in log, log[-3000:]
    return log


def test_the_good_run_trains(trained) -> None:
    workdir, _, console = trained
    summary = json.loads((workdir / _summary("good")).read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4, summary
    assert (workdir / "results/runs/good/export/last/config.yaml").exists(), console[-3000:]
    assert "Traceback" not in console, "a user error must not print a traceback"
    # the dev speakers d and g are letters no train transcript has: a warning, not a refusal
    smoke = json.loads((workdir / "results/runs/good/smoke/summary.json").read_text())
    assert smoke["unk_tokens"]["train"]["unk"] == 0
    assert smoke["unk_tokens"]["dev"]["unseen_words"] == ["d", "g"], smoke["unk_tokens"]
    assert "in words with a character no train transcript has" in smoke["warnings"][0]


def test_nan_audio_is_named_by_the_loader(trained) -> None:
    workdir, corpora, _ = trained
    log = _failed(workdir, "smoke_train", "nan")
    manifest = corpora["nan_audio"].manifest("train")
    assert re.search(r"train-f-1\.wav: cut \S+ \(.*\) has 1 NaN/inf sample\(s\)", log), log[-3000:]
    assert f"{manifest}:{NAN_INDEX + 1}" in log, log[-3000:]
    assert "full_decode" in log, log[-3000:]  # what to do: let validation find them all
    assert not (workdir / "results/runs/nan/smoke/summary.json").exists()
    assert not (workdir / _summary("nan")).exists()


def test_an_init_package_with_mis_shaped_keys_names_them(trained) -> None:
    workdir, _, _ = trained
    log = _failed(workdir, "smoke_train", "misfit")
    assert "results/runs/good/export/last" in log, log[-3000:]
    assert "'encoder.embed.out.weight' (16, 64) vs (24, 96)" in log, log[-3000:]
    assert "init.exclude" in log, log[-3000:]
    assert "encoder_conf.output_size set by the run's overrides" in log, log[-3000:]
    assert not (workdir / "results/runs/misfit/smoke/summary.json").exists()


def test_a_fine_tuning_run_trains_the_packages_model_not_its_recipes(trained) -> None:
    """Issue 32: the recipe `wider` (output_size 24) gives the training sections; the model is
    the one good's package describes (16), so good's weights load and the run trains."""
    workdir = trained[0]
    summary = json.loads((workdir / _summary("tuned")).read_text())
    assert summary["status"] == "completed", summary
    assert summary["recipe_settings"]["encoder_conf"]["output_size"] == 16
    package_config = workdir / "results/runs/good/export/last/config.yaml"
    assert summary["architecture"]["from"] == str(package_config.relative_to(workdir))
    assert summary["architecture"]["overridden"] == []
    assert summary["init"]["fresh_keys"] == 0, summary["init"]


def test_a_damaged_last_checkpoint_falls_back_to_an_intact_one(trained, tmp_path) -> None:
    workdir = copy_workdir(trained[0], tmp_path / "run")
    checkpoints = workdir / "results/work/good/checkpoints"
    last = checkpoints / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # cut short
    proc = snakemake(workdir, _summary("good"), "--forcerun", "train", check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (workdir / "logs/train/good.log").read_text()
    assert re.search(r"last\.ckpt.*damaged.*valid\.loss\.step0000004\.ckpt", log), log[-3000:]
    summary = json.loads((workdir / _summary("good")).read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4


def test_no_intact_checkpoint_says_to_delete_the_work_dir_and_that_recovers(
    trained, tmp_path
) -> None:
    workdir = copy_workdir(trained[0], tmp_path / "run")
    checkpoints = workdir / "results/work/good/checkpoints"
    for ckpt in checkpoints.glob("*.ckpt"):
        ckpt.unlink()
        ckpt.write_bytes(b"")  # zero bytes (the links to the artifacts broken first)
    proc = snakemake(workdir, _summary("good"), "--forcerun", "train", check=False)
    assert proc.returncode != 0
    log = _failed(workdir, "train", "good")
    assert (
        "results/work/good/checkpoints/last.ckpt: cannot resume from it: the file is empty" in log
    )
    assert "also damaged: valid.loss.step0000004.ckpt" in log, log[-3000:]
    assert "Delete results/work/good/checkpoints to train the run from scratch" in log
    assert not (workdir / _summary("good")).exists()
    assert "Traceback" not in proc.stdout + proc.stderr
    shutil.rmtree(checkpoints)  # what the message says to do
    snakemake(workdir, _summary("good"))
    assert json.loads((workdir / _summary("good")).read_text())["steps"] == 4


def test_a_disk_that_fills_during_a_checkpoint_write_leaves_no_torn_file(trained, tmp_path) -> None:
    """A file-size limit below a checkpoint's size (113 KB; every other file stays under 40 KB)
    on the whole workflow: the checkpoint write fails, nothing torn is left to resume from, and
    a rerun with room trains the run."""
    from asrflow.checkpoints import read_training_checkpoint

    workdir = copy_workdir(trained[0], tmp_path / "run")
    shutil.rmtree(workdir / "results/work/good")  # train from scratch
    limit = 80_000

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        snakemake_command(_summary("good"), "--forcerun", "train"),
        cwd=workdir, capture_output=True, text=True, env=environment(), preexec_fn=limited,
        timeout=900,
    )  # fmt: skip
    assert proc.returncode != 0
    log = _failed(workdir, "train", "good")
    assert re.search(r"\.ckpt: could not be written whole .*Free space on the filesystem", log), (
        log[-3000:]
    )
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (workdir / _summary("good")).exists()
    for path in (workdir / "results/work/good").rglob("*.ckpt"):
        read_training_checkpoint(path)  # whatever is left is whole
    snakemake(workdir, _summary("good"))
    assert json.loads((workdir / _summary("good")).read_text())["status"] == "completed"


def test_a_token_list_that_does_not_match_the_tokenizer_stops_the_smoke_run(
    trained, tmp_path
) -> None:
    workdir = copy_workdir(trained[0], tmp_path / "run")
    tokens = workdir / "results/tokenizers/clean_char/tokens.txt"
    lines = tokens.read_text().splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    tokens.write_text("\n".join(lines) + "\n")
    # a tokenizer directory brought in from elsewhere: without its record (an edit of the
    # recorded output is refused before any job reads it: test_workflow_e2e)
    (tokens.parent / "bpe.model.prov.json").unlink()
    smoke = "results/runs/good/smoke/summary.json"
    proc = snakemake(workdir, smoke, "--forcerun", "smoke_train", check=False)
    assert proc.returncode != 0
    log = _failed(workdir, "smoke_train", "good")
    assert "tokens.txt" in log and "mismatch" in log, log[-3000:]
    assert not (workdir / "results/runs/good/smoke/summary.json").exists()
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_tokenizer_that_cannot_spell_the_runs_text_stops_the_smoke_run(trained, tmp_path) -> None:
    """Issue 30: a run whose tokenizer was trained on another corpus trained to the end with 72
    of 824 target tokens <unk>, and nothing said so."""
    from lhotse import CutSet

    from asrflow.data.cuts import save_cuts
    from asrflow.text import TextNormalization
    from asrflow.tokenizer import TokenizerConfig, train_tokenizer
    from tests.cuts import audio_less_cut

    workdir = copy_workdir(trained[0], tmp_path / "run")
    other = tmp_path / "other.jsonl.gz"  # another corpus's text: no a, c, f, z
    cuts = (audio_less_cut(f"o{i}", text="hello number one two three") for i in range(3))
    save_cuts(CutSet.from_cuts(cuts), other)
    tok = workdir / "results/tokenizers/clean_char"
    config = TokenizerConfig(model_type="char")
    train_tokenizer(other, tok / "bpe.model", tok / "tokens.txt", config, TextNormalization())
    (tok / "bpe.model.prov.json").unlink()  # brought in from elsewhere, without its record
    smoke = "results/runs/good/smoke/summary.json"
    proc = snakemake(workdir, smoke, "--forcerun", "smoke_train", check=False)
    assert proc.returncode != 0
    log = _failed(workdir, "smoke_train", "good")
    assert re.search(r"run good: \d+ of \d+ train target tokens \([\d.]+ %\) are <unk>", log), log[
        -3000:
    ]
    assert "from words such as 'zero', " in log, log[-3000:]
    assert "more than diagnostics.max_unk_share (0.1 %)" in log, log[-3000:]
    assert "Train the tokenizer on this run's corpus" in log, log[-3000:]
    assert not (workdir / smoke).exists()
    assert not (workdir / "results/runs/good/smoke/work/train").exists()  # nothing trained
    assert "Traceback" not in proc.stdout + proc.stderr
