"""Tests for asrflow.workflow: the Snakemake script adapter."""

import json
import logging
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params

from asrflow.errors import AsrflowError, ValidationFailed
from asrflow.hashing import sha256_file
from asrflow.verify import MODIFIED_OUTPUT, verify
from asrflow.workflow import Step, _caller_script, files_by_name, rank_log, step

ROOT = Path(__file__).resolve().parents[1]


def fake_snakemake(record: bool = True, log: bool = True) -> SimpleNamespace:
    """A snakemake object like the one Snakemake injects into scripts."""
    outputs = {"data": "results/toy/data.txt", "model": "results/toy/model"}
    if record:
        outputs["record"] = "results/toy/data.prov.json"
    return SimpleNamespace(
        input=InputFiles(fromdict={"text": "data/in.txt", "extra": ["data/x1", "data/x2"]}),
        output=OutputFiles(fromdict=outputs),
        params=Params(fromdict={"alpha": 0.5, "where": Path("a")}),
        log=Log(["logs/toy.log"] if log else []),
        rule="toy",
        wildcards=None,
    )


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASRFLOW_HASH_CACHE", str(tmp_path / "cache.sqlite"))
    Path("data").mkdir()
    Path("data/in.txt").write_text("in\n")
    Path("data/x1").write_text("1")
    Path("data/x2").write_text("2")
    Path("audio").mkdir()
    Path("audio/a.wav").write_bytes(b"RIFF....")
    return tmp_path


def produce() -> None:
    Path("results/toy/model").mkdir(parents=True, exist_ok=True)
    Path("results/toy/data.txt").write_text("result\n")
    Path("results/toy/model/w.bin").write_bytes(b"\x00\x01")


def test_files_by_name() -> None:
    nl = InputFiles(fromdict={"a": "x", "b": ["y", "z"]})
    nl.append("loose")
    assert files_by_name(nl) == {"a": ["x"], "b": ["y", "z"], "_unnamed": ["loose"]}
    assert files_by_name(["p", "q"]) == {"_unnamed": ["p", "q"]}
    assert files_by_name({"k": "v"}) == {"k": ["v"]}
    assert files_by_name(None) == {}


def test_step_writes_record_and_log(ws: Path) -> None:
    sm = fake_snakemake()
    with step(sm) as s:
        logging.getLogger("asrflow.somewhere").info("working hard")
        produce()
        s.add_extra_inputs("audio", ["audio/a.wav"])
    rec = json.loads(Path("results/toy/data.prov.json").read_text())
    assert rec["rule"] == "toy"
    assert rec["inputs"] == {
        "text": {"data/in.txt": sha256_file("data/in.txt")},
        "extra": {"data/x1": sha256_file("data/x1"), "data/x2": sha256_file("data/x2")},
    }
    assert set(rec["outputs"]) == {"data", "model"}, "the record must not list itself"
    assert rec["directories"] == ["results/toy/model"]
    assert rec["extra_inputs"] == {"audio": {"audio/a.wav": sha256_file("audio/a.wav")}}
    assert rec["params"] == {"alpha": 0.5, "where": "a"}
    script = rec["code"]["script"]
    assert Path(script["path"]).name == "test_workflow.py"
    assert script["sha256"] == sha256_file(__file__)
    assert rec["started"] <= rec["finished"]
    text = Path("logs/toy.log").read_text()
    assert "working hard" in text and "rule toy: started" in text and "rule toy: done" in text
    assert Path("cache.sqlite").exists(), "hashing goes through the persistent cache"
    assert verify(["results/toy"]) == []


def test_record_detects_later_tampering(ws: Path) -> None:
    with step(fake_snakemake()):
        produce()
    p = Path("results/toy/data.txt")
    st = p.stat()
    p.write_text("resulT\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    found = verify(["results/toy/data.txt"])
    assert [(m.kind, m.path, m.record) for m in found] == [
        (MODIFIED_OUTPUT, "results/toy/data.txt", "results/toy/data.prov.json")
    ]


def test_no_record_output_means_no_record(ws: Path) -> None:
    with step(fake_snakemake(record=False, log=False)):
        produce()
    assert not list(Path("results").rglob("*.prov.json"))


def test_user_error_logged_as_message_and_reraised(ws: Path) -> None:
    with pytest.raises(ValidationFailed), step(fake_snakemake()):
        raise ValidationFailed("data/in.txt, line 3: empty transcript; remove the line")
    text = Path("logs/toy.log").read_text()
    assert "rule toy failed: data/in.txt, line 3: empty transcript; remove the line" in text
    assert "Traceback" not in text
    assert not Path("results/toy/data.prov.json").exists()


def test_unexpected_error_logged_with_traceback(ws: Path) -> None:
    with pytest.raises(ZeroDivisionError), step(fake_snakemake()):
        produce()
        _ = 1 / 0
    text = Path("logs/toy.log").read_text()
    assert "Traceback" in text and "ZeroDivisionError" in text and "unexpected" in text
    assert not Path("results/toy/data.prov.json").exists()


def test_user_error_in_a_snakemake_job_exits_without_a_traceback(ws: Path, capsys) -> None:
    """Issue 12, item 7: the console showed a full traceback after the clean message."""
    with pytest.raises(SystemExit) as stop, step(fake_snakemake(), quiet_exit=True):
        raise ValidationFailed("data/in.txt, line 3: empty transcript; remove the line")
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "empty transcript; remove the line" in err and "Traceback" not in err
    assert "Traceback" not in Path("logs/toy.log").read_text()


def test_a_real_snakemake_job_exits_quietly_by_default(ws: Path) -> None:
    from snakemake.script import Snakemake

    sm = Snakemake.__new__(Snakemake)
    sm.log, sm.rule, sm.input, sm.output = Log([]), "toy", [], []
    assert step(sm).quiet_exit and not step(fake_snakemake()).quiet_exit


def test_an_input_changed_after_it_was_written_is_named_not_called_a_bug(ws: Path) -> None:
    """Issue 12, item 6: a flipped byte in an intermediate read as "a bug: BadGzipFile" (here
    it changes while the job runs, after the check at its start)."""
    with step(fake_snakemake()):
        produce()
    damaged = Path("results/toy/data.txt")
    consumer = fake_snakemake(record=False)
    consumer.input = InputFiles(fromdict={"data": str(damaged), "text": "data/in.txt"})
    consumer.log = Log(["logs/consumer.log"])
    with pytest.raises(SystemExit), step(consumer, quiet_exit=True):
        damaged.write_text("resulT\n")
        raise ValueError("CRC check failed")
    text = Path("logs/consumer.log").read_text()
    assert "failed reading its inputs (ValueError: CRC check failed)" in text
    assert "results/toy/data.txt: modified output (written by rule toy)" in text
    assert "asrflow verify" in text and "a bug" not in text
    # an input that is as written does not excuse a bug
    damaged.write_text("result\n")
    with pytest.raises(ValueError), step(consumer, quiet_exit=True):
        raise ValueError("CRC check failed")
    assert "a bug" in Path("logs/consumer.log").read_text()


def test_an_input_changed_after_it_was_written_stops_the_job_before_it_runs(ws: Path) -> None:
    """Issue 30: a flipped byte that still parses (a piece's score in bpe.model) was used."""
    with step(fake_snakemake()):
        produce()
    consumer = fake_snakemake(record=False)
    consumer.input = InputFiles(
        fromdict={"data": "results/toy/data.txt", "weights": "results/toy/model/w.bin"}
    )
    consumer.log = Log(["logs/consumer.log"])
    ran = []
    with step(consumer, quiet_exit=True):  # as written: the job runs
        ran.append(1)
    Path("results/toy/model/w.bin").write_bytes(b"\x00\x03")  # in a directory output
    with pytest.raises(SystemExit), step(consumer, quiet_exit=True):
        ran.append(2)
    assert ran == [1]
    text = Path("logs/consumer.log").read_text()
    assert "rule toy failed: this input changed after it was written" in text
    assert (
        "results/toy/model/w.bin: modified output (written by rule toy); expected "
        f"{sha256_file_of(b'\x00\x01')}, actual "
        f"{sha256_file_of(b'\x00\x03')} [record results/toy/data.prov.json]"
    ) in text
    assert "Delete it" in text and "snakemake --forcerun toy" in text
    assert "asrflow verify results" in text and "Traceback" not in text
    # outside a Snakemake job the user error is raised as such
    with pytest.raises(AsrflowError, match=r"results/toy/model/w\.bin: modified output"):
        with step(consumer, quiet_exit=False):
            ran.append(3)
    assert ran == [1]


def test_a_changed_input_of_the_synthetic_corpus_is_not_refused(ws: Path) -> None:
    """The demo corpus is source data, edited like any corpus (its import reruns)."""
    producer = fake_snakemake()
    producer.rule = "synthesize_corpus"
    with step(producer):
        produce()
    Path("results/toy/data.txt").write_text("a transcript fixed by hand\n")
    consumer = fake_snakemake(record=False)
    consumer.input = InputFiles(fromdict={"manifest": "results/toy/data.txt"})
    ran = []
    with step(consumer, quiet_exit=True):
        ran.append(1)
    assert ran == [1]


def sha256_file_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_missing_output_fails_the_step(ws: Path) -> None:
    with pytest.raises(FileNotFoundError, match="results/toy/model"), step(fake_snakemake()):
        Path("results/toy").mkdir(parents=True)
        Path("results/toy/data.txt").write_text("only one\n")
    assert "could not write the provenance record" in Path("logs/toy.log").read_text()
    assert not Path("results/toy/data.prov.json").exists()


def test_logging_restored_after_step(ws: Path) -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    with pytest.raises(AsrflowError), step(fake_snakemake()):
        raise AsrflowError("x")
    with step(fake_snakemake(record=False)):
        pass
    assert (list(root.handlers), root.level) == before


def test_other_ranks_keep_off_the_job_log_and_record(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank Lightning starts inside a one-task SLURM job runs the job script again: it must not
    truncate rank 0's log nor write the record (rank 0's outputs may not exist yet)."""
    Path("logs").mkdir()
    Path("logs/toy.log").write_text("rank 0 was here\n")
    for key, value in {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    with step(fake_snakemake()) as s:
        logging.getLogger("asrflow.somewhere").info("rank 1 working")
    assert s.rank == 1
    assert Path("logs/toy.log").read_text() == "rank 0 was here\n"
    text = Path("logs/toy.rank1.log").read_text()
    assert "rank 1 working" in text and "rank 1 of a multi-process job" in text
    assert "rule toy: done" in text
    assert not Path("results/toy/data.prov.json").exists()
    assert s.write_record() is None
    # the process that started the others (LOCAL_RANK=0 once it has) owns the job
    monkeypatch.setenv("LOCAL_RANK", "0")
    with step(fake_snakemake()):
        produce()
    assert "rank 1 working" not in Path("logs/toy.log").read_text()
    assert Path("results/toy/data.prov.json").is_file()


def test_rank_log() -> None:
    assert rank_log("logs/train/big.log", 3) == Path("logs/train/big.rank3.log")


def test_script_path_as_snakemake_runs_it(ws: Path) -> None:
    """Snakemake runs a temp copy whose preamble points ``__file__`` at the real script."""
    real = ws / "scripts" / "toy.py"
    real.parent.mkdir()
    body = (
        "from pathlib import Path\n"
        "from asrflow.workflow import step\n"
        "with step(snakemake):\n"
        "    Path('results/toy/model').mkdir(parents=True)\n"
        "    Path('results/toy/data.txt').write_text('x')\n"
    )
    real.write_text(body)
    tmp_copy = ws / ".snakemake" / "scripts" / "tmpabc.toy.py"
    tmp_copy.parent.mkdir(parents=True)
    preamble = f"import sys; __real_file__ = __file__; __file__ = {str(real)!r};\n"
    tmp_copy.write_text(preamble + body)
    runpy.run_path(str(tmp_copy), init_globals={"snakemake": fake_snakemake()})
    rec = json.loads(Path("results/toy/data.prov.json").read_text())
    assert rec["code"]["script"] == {"path": "scripts/toy.py", "sha256": sha256_file(real)}


def test_explicit_script_and_unknown_script(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Step(fake_snakemake(), script="x.py").script == Path("x.py")
    monkeypatch.setattr("sys.argv", ["python"])
    # No usable __file__ and no script in argv: the script is unknown (None), not a guess.
    assert _caller_script({}) is None
    assert _caller_script({"__file__": str(ws / "missing.py")}) is None
    assert _caller_script({"__file__": "<stdin>"}) is None
    monkeypatch.setattr("sys.argv", [__file__])
    assert _caller_script({}) == Path(__file__)


SNAKEFILE = """
rule a:
    input: text="data/in.txt"
    output:
        data="results/a/out.txt",
        model=directory("results/a/model"),
        record="results/a/out.prov.json",
    params: alpha=0.5
    log: "logs/a.log"
    script: "scripts/a.py"
"""

SCRIPT = """
from pathlib import Path
from asrflow.workflow import step

with step(snakemake) as s:
    Path(snakemake.output.model).mkdir(parents=True, exist_ok=True)
    Path(snakemake.output.model, "w.bin").write_bytes(b"abc")
    Path(snakemake.output.data).write_text(Path(snakemake.input.text).read_text().upper())
"""


@pytest.mark.slow
def test_real_snakemake_run(ws: Path) -> None:
    """A real Snakemake job: script path, directory() output and verify all line up."""
    import subprocess
    import sys

    Path("Snakefile").write_text(SNAKEFILE)
    Path("scripts").mkdir()
    Path("scripts/a.py").write_text(SCRIPT)
    exe = Path(sys.executable).parent / "snakemake"
    proc = subprocess.run(
        [str(exe), "results/a/out.prov.json", "-c1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(Path("results/a/out.prov.json").read_text())
    assert rec["code"]["script"]["path"] == "scripts/a.py"
    assert rec["params"] == {"alpha": 0.5}
    assert "rule a: done" in Path("logs/a.log").read_text()
    assert verify(["results"]) == []  # .snakemake_timestamp in directory() outputs is ignored
    w = Path("results/a/model/w.bin")
    st = w.stat()
    w.write_bytes(b"abd")
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [m.kind for m in verify([w])] == [MODIFIED_OUTPUT]


def test_the_snakefile_parses_without_importing_torch():
    """Parsing the Snakefile (every snakemake call, and every SLURM job again) imports the
    modules the rules use; torch there would add seconds to each. Checked in a fresh process:
    the asrflow modules rules/*.smk import at the top level."""
    smk = "\n".join(p.read_text(encoding="utf-8") for p in sorted(ROOT.glob("rules/*.smk")))
    modules = sorted(set(re.findall(r"^from (asrflow[\w.]*) import", smk, re.M)))
    assert "asrflow.train.run.launch" in modules  # the one that used to pull in the runner
    code = "; ".join(f"import {m}" for m in modules)
    code += "; import sys; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", f"{modules} import {out.stdout.strip()}"


def test_asrflow_debug_puts_a_user_errors_traceback_in_the_log(ws: Path, monkeypatch) -> None:
    monkeypatch.setenv("ASRFLOW_DEBUG", "1")
    with pytest.raises(SystemExit), step(fake_snakemake(), quiet_exit=True):
        raise ValidationFailed("data/in.txt, line 3: empty transcript; remove the line")
    assert "Traceback" in Path("logs/toy.log").read_text()
