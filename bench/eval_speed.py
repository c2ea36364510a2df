"""Benchmark: decoding speed of one exported package, asrflow's decoders against ESPnet's.

Decodes one eval set with one package (a directory written by rule ``export_artifact``,
:mod:`asrflow.export.package`), in one process, on the same audio (loaded once, at the model's
sampling rate), with the same torch threads, by:

- asrflow ``greedy_ctc`` and ``lexicon_lm`` (:class:`asrflow.evaluate.decode.PackageModel` and
  :func:`~asrflow.evaluate.decode.timed_transcribe`, exactly as rule ``evaluate`` runs them: the
  decoding settings, ``batch_seconds`` and the scoring contract come from the ``evaluation``
  section of the config; ``lexicon_lm`` reads the run's word LM, rule ``word_lm``), each in
  the evaluation dtype (``evaluation.dtype``: bf16 weights, no autocast, frontend float32) and in
  float32; and ``greedy_ctc`` in float32 with ``batch_seconds`` 0 (``1 utt/pass``: one
  utterance per forward pass, as ``Speech2Text`` decodes), which tells batching's share apart;
- ESPnet's own ``Speech2Text`` (loaded by :func:`asrflow.export.package.load_speech2text`),
  CTC-only (``ctc_weight`` 1.0, no LM), float32, one utterance per call, beam 1 and beam 10.

Timed is the decoding alone (audio loading and model loading excluded; model loading is shown
apart). Every system is warmed up by one untimed pass over the set; then ``--rounds`` timed
passes, the systems interleaved (each round starts one system later), and the median (or with
``--stat best`` the fastest) pass is reported. Printed per system: audio seconds, decode wall
seconds, real-time factor (RTF = wall / audio), speed relative to Speech2Text beam 1 (x2.0 =
twice as fast), pooled WER and CER under the config's scoring contract
(:mod:`asrflow.evaluate.scoring`), and how many transcripts differ from Speech2Text beam 1's, so
that a speed-up that breaks accuracy shows. The header names the machine (CPU model, cores, bf16
instructions), torch and ESPnet versions, commit, date and the load average before and after.

Defaults: the demo's run (``demo_ctc``), its ``valid.loss.best`` package (or whichever artifact
was exported), its word LM and its dev set, all made by the README's main command
(``--workdir`` names another directory the workflow ran in)::

    uv run python bench/eval_speed.py --quick          # 16 utterances, 1 round: a smoke test
    uv run python bench/eval_speed.py                  # the whole dev set, 3 rounds
    uv run python bench/eval_speed.py --threads 1 --rounds 5 --limit 50
    uv run python bench/eval_speed.py --package results/runs/demo_ctc/export/last \\
        --cuts results/data/demo/filtered/test.jsonl.gz

Compare figures measured in one run: these machines are shared and noisy (the load average is
printed so that a busy machine shows).

The figures are also written as ``results/bench/eval_speed.json`` (``bench/figures.py``): a row
per asrflow system against the Speech2Text ones, in the columns of
``docs/figures/performance_workflow.json``, the "Decoding, hashing" table of docs/performance.md.
That table also holds other benchmarks' rows (``rerun_speed.py``'s), so a fresh run's rows
replace its decoding rows there rather than the whole file.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from asrflow import layout, project
from asrflow.data.cuts import load_cuts, text
from asrflow.errors import AsrflowError
from asrflow.evaluate.decode import Decoding, PackageModel, timed_transcribe
from asrflow.evaluate.scoring import contract_sha256, pooled, score_utterance
from asrflow.evaluate.stages import decoding_from_config, load_audio
from asrflow.export.find import model_sample_rate
from asrflow.export.package import CONFIG, MANIFEST, load_speech2text
from asrflow.settings import with_defaults
from asrflow.text import TextNormalization

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RUN = "demo_ctc"
DEFAULT_ARTIFACT = "valid.loss.best"
S2T_BEAMS = (1, 10)
REFERENCE = "Speech2Text beam 1"
QUICK_LIMIT = 16
ONE_AT_A_TIME = " 1 utt/pass"
MAIN_COMMAND = "uv run snakemake"


class Missing(SystemExit):
    """An input that is not there: the message names it and the command that makes it."""

    def __init__(self, what: str, path: Path, workdir: Path, option: str) -> None:
        rel = _rel(path, workdir)
        if Path(rel).is_absolute():  # given by an option, outside the workflow's results
            hint = f"  (given by {option})"
        else:
            hint = (
                f"  the README's main command makes it (`{MAIN_COMMAND}` in {workdir}); it alone: "
                f"`{MAIN_COMMAND} {rel}`"
            )
        super().__init__(f"eval_speed: missing {what}: {path}\n{hint}")


@dataclasses.dataclass
class System:
    """One way of decoding the set: a name, its dtype and a function that decodes all the audio
    and returns (transcripts in input order, decode seconds)."""

    name: str
    dtype: str
    decode: Callable[[], tuple[list[str], float]]
    load_seconds: float
    hyps: list[str] = dataclasses.field(default_factory=list)
    seconds: list[float] = dataclasses.field(default_factory=list)
    unstable: bool = False


# -- inputs ---------------------------------------------------------------------------------------
def _rel(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when it lies under it (symbolic links kept), else absolute."""
    full = Path(os.path.abspath(path))
    try:
        return str(full.relative_to(os.path.abspath(root)))
    except ValueError:
        return str(full)


def load_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SystemExit(f"eval_speed: no config at {path} (--config)")
    with open(path, encoding="utf-8") as f:
        return with_defaults(yaml.safe_load(f) or {}, source=str(path))


def choose_run(config: dict[str, Any], run: str | None) -> str:
    runs = list(config.get("runs") or {})
    if run is None:
        if not runs:
            raise SystemExit("eval_speed: the config has no runs; name a --package and --cuts")
        run = DEFAULT_RUN if DEFAULT_RUN in runs else runs[0]
    project.run(config, run)  # an unknown run is an error naming the known ones
    return run


def choose_package(workdir: Path, run: str, artifact: str | None, package: str | None) -> Path:
    """``--package``; else the run's export of ``--artifact``; else its ``valid.loss.best``, or
    the first artifact it has exported."""
    if package is not None:
        path = Path(package)
    elif artifact is not None:
        path = workdir / layout.export_dir(run, artifact)
    else:
        path = workdir / layout.export_dir(run, DEFAULT_ARTIFACT)
        if not (path / MANIFEST).is_file():
            exported = sorted((workdir / layout.run_file(run, "export")).glob(f"*/{MANIFEST}"))
            if exported:
                path = exported[0].parent
    if not (path / MANIFEST).is_file():
        raise Missing(f"the exported package (its {MANIFEST})", path, workdir, "--package")
    return path


def eval_inputs(
    config: dict[str, Any], run: str, args: argparse.Namespace
) -> tuple[Path, Path, Path]:
    """(package, eval cuts, word LM counts), each checked to exist."""
    workdir = Path(args.workdir)
    package = choose_package(workdir, run, args.artifact, args.package)
    if args.cuts is not None:
        cuts = Path(args.cuts)
    else:
        cuts = workdir / layout.filtered(project.run_dev_corpus(config, run), "dev")
    if not cuts.is_file():
        raise Missing("the eval set's filtered cuts", cuts, workdir, "--cuts")
    word_lm = Path(args.word_lm) if args.word_lm else workdir / layout.word_lm_file(run)
    if not word_lm.is_file():
        what = "the run's word LM counts (rule word_lm; lexicon_lm decoding reads them)"
        raise Missing(what, word_lm, workdir, "--word-lm")
    return package, cuts, word_lm


# -- the header -----------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bf16_instructions() -> str:
    """The CPU's bf16 instruction sets (without them bf16 matmuls are emulated, and slow)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    found = [x for x in line.split() if x in ("avx512_bf16", "amx_bf16")]
                    return " ".join(found) or "none"
    except OSError:
        pass
    return "unknown"


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{sha} (with uncommitted changes)" if dirty else sha


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# -- the systems ----------------------------------------------------------------------------------
def asrflow_system(
    package: Path,
    decoding: Decoding,
    word_lm: Path,
    audio: Sequence[np.ndarray],
    sample_rate: int,
    suffix: str = "",
) -> System:
    start = time.perf_counter()
    model = PackageModel(package, decoding, word_lm if decoding.mode == "lexicon_lm" else None)
    loaded = time.perf_counter() - start
    return System(
        name=f"asrflow {decoding.mode}{suffix}",
        dtype=decoding.dtype,
        decode=lambda: timed_transcribe(model, audio, sample_rate, decoding.batch_seconds),
        load_seconds=loaded,
    )


def speech2text_system(
    package: Path, beam: int, device: str, audio: Sequence[np.ndarray]
) -> System:
    start = time.perf_counter()
    s2t = load_speech2text(package, device=device, ctc_weight=1.0, beam_size=beam, verify=False)
    loaded = time.perf_counter() - start
    cuda = torch.device(device).type == "cuda"
    waveforms = [torch.from_numpy(a) for a in audio]

    def decode() -> tuple[list[str], float]:
        hyps: list[str] = []
        spent = 0.0
        for speech in waveforms:
            if cuda:
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            results = s2t(speech)
            if cuda:
                torch.cuda.synchronize(device)
            spent += time.perf_counter() - started
            hyps.append(results[0][0] if results else "")
        return hyps, spent

    actual = s2t.beam_search.beam_size if s2t.beam_search is not None else beam
    name = f"Speech2Text beam {beam}"
    if actual != beam:  # load_speech2text caps it at the vocabulary
        name += f" (capped at {actual})"
    return System(name=name, dtype="float32", decode=decode, load_seconds=loaded)


def measure(systems: Sequence[System], rounds: int) -> None:
    """One untimed warm-up pass per system (its transcripts are kept), then ``rounds`` timed
    passes, the systems interleaved, each round starting one system later."""
    for s in systems:
        print(f"  warm-up  {s.name} ({s.dtype})", file=sys.stderr, flush=True)
        s.hyps, _ = s.decode()
    for r in range(rounds):
        order = [systems[(i + r) % len(systems)] for i in range(len(systems))]
        for s in order:
            gc.collect()
            hyps, seconds = s.decode()
            s.seconds.append(seconds)
            s.unstable |= hyps != s.hyps
            print(
                f"  round {r + 1}/{rounds}  {s.name} ({s.dtype}): {seconds:.3f} s",
                file=sys.stderr,
                flush=True,
            )


# -- main -----------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Defaults are the demo's files; see the module docstring.",
    )
    add = parser.add_argument
    add("--workdir", default=str(REPO), help="where the workflow ran (default: this checkout)")
    add("--config", help="workflow config (default: <workdir>/config/config.yaml)")
    add("--run", help=f"the run whose files are used (default: {DEFAULT_RUN})")
    add("--artifact", help=f"its artifact (default: {DEFAULT_ARTIFACT}, else the first exported)")
    add("--package", help="a package directory (instead of --run/--artifact)")
    add("--cuts", help="eval cuts (default: the run's filtered dev split)")
    add("--word-lm", help="word counts for lexicon_lm (default: the run's, rule word_lm)")
    add("--threads", type=int, help="torch threads (default: rule evaluate's)")
    add("--rounds", type=int, help="timed passes (default: 3; --quick: 1)")
    add("--limit", type=int, help=f"the first N utterances only (--quick: {QUICK_LIMIT})")
    add("--quick", action="store_true", help="a smoke test: few utterances, one round")
    add("--stat", choices=("median", "best"), default="median", help="the pass reported")
    add("--batch-seconds", type=float, help="asrflow's audio per forward pass (default: config)")
    add("--device", default="cpu", help="cpu (default) or cuda[:N]")
    args = parser.parse_args(argv)
    if args.config is None:
        args.config = str(Path(args.workdir) / "config" / "config.yaml")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.limit is None and args.quick:
        args.limit = QUICK_LIMIT
    if args.rounds < 1 or (args.limit is not None and args.limit < 1):
        parser.error("--rounds and --limit must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    load_before = load_average()
    workdir = Path(args.workdir)
    config = load_config(Path(args.config))
    try:
        run = choose_run(config, args.run)
    except AsrflowError as exc:
        raise SystemExit(f"eval_speed: {exc}") from None
    package, cuts_path, word_lm = eval_inputs(config, run, args)
    evaluation = config["evaluation"]
    res = evaluation["resources"]
    threads = args.threads or res["cpus_per_device"] * max(1, res["devices"])
    torch.set_num_threads(threads)
    contract = TextNormalization.from_dict(evaluation["scoring"])
    rule = dataclasses.replace(decoding_from_config(evaluation), device=args.device)
    if args.batch_seconds is not None:
        rule = dataclasses.replace(rule, batch_seconds=args.batch_seconds)

    all_cuts = list(load_cuts(cuts_path))
    cuts = all_cuts[: args.limit] if args.limit else all_cuts
    if not cuts:
        raise SystemExit(f"eval_speed: {cuts_path} has no utterances")

    dtypes = list(dict.fromkeys([rule.dtype, "float32"]))
    print("loading the systems ...", file=sys.stderr, flush=True)
    importlib.import_module("espnet2.bin.asr_inference")  # not in the first system's load time
    with open(package / CONFIG, encoding="utf-8") as f:
        sample_rate = model_sample_rate((yaml.safe_load(f) or {}).get("frontend_conf"))
    audio = [load_audio(c, sample_rate) for c in cuts]
    audio_seconds = sum(len(a) for a in audio) / sample_rate
    systems = [speech2text_system(package, b, args.device, audio) for b in S2T_BEAMS]
    for mode in ("greedy_ctc", "lexicon_lm"):
        for dtype in dtypes:
            decoding = dataclasses.replace(rule, mode=mode, dtype=dtype)
            systems.append(asrflow_system(package, decoding, word_lm, audio, sample_rate))
    if rule.batch_seconds > 0:  # and as Speech2Text decodes: one utterance per forward pass
        decoding = dataclasses.replace(rule, mode="greedy_ctc", dtype="float32", batch_seconds=0)
        systems.append(
            asrflow_system(package, decoding, word_lm, audio, sample_rate, ONE_AT_A_TIME)
        )
    measure(systems, args.rounds)

    manifest = json.loads((package / MANIFEST).read_text(encoding="utf-8"))
    print("asrflow decoding speed: bench/eval_speed.py")
    print(f"date      {started} (start)")
    print(f"commit    {commit()}")
    print(
        f"machine   {cpu_model()}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
        f"bf16 instructions: {bf16_instructions()}; device {args.device}"
    )
    print(
        f"software  torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"espnet {version('espnet')}, torchaudio {version('torchaudio')}, python "
        f"{platform.python_version()}"
    )
    print(f"load avg  before {load_before}, after {load_average()} (1, 5, 15 min)")
    print(
        f"package   {_rel(package, workdir)} (run {run}, artifact {manifest.get('artifact')}, "
        f"{manifest.get('num_parameters', 0):,} parameters, ctc_only {manifest.get('ctc_only')})"
    )
    print(
        f"eval set  {_rel(cuts_path, workdir)}: {len(cuts)} of {len(all_cuts)} utterances, "
        f"{audio_seconds:.1f} s of audio at {sample_rate} Hz"
    )
    lm = f", word LM {_rel(word_lm, workdir)}"
    print(
        f"decoding  as rule evaluate (from {_rel(Path(args.config), workdir)}): batch_seconds "
        f"{rule.batch_seconds:g}, evaluation dtype {rule.dtype}; lexicon_lm beam_size "
        f"{rule.beam_size}, lm_weight {rule.lm_weight:g}, word_score {rule.word_score:g}, "
        f"beam_size_token {rule.beam_size_token}{lm}; Speech2Text: ctc_weight 1.0, no LM, one "
        "utterance per call"
    )
    print(f"scoring   contract {contract_sha256(contract)[:12]} {contract.to_dict()}")
    print(
        f"timing    decode only (audio and model loading excluded); {args.stat} of {args.rounds} "
        "timed round(s) after one warm-up pass, systems interleaved; "
        f"speed = {REFERENCE} wall / wall"
    )
    print()
    report(systems, cuts, contract, audio_seconds, args.stat)

    from figures import figures_json, settings_of, stamp_rows, write_figures  # bench/

    setup = (
        f"decoding {_rel(cuts_path, workdir)}, {len(cuts)} utt., {torch.get_num_threads()} "
        f"threads (`eval_speed.py`, {args.stat} of {args.rounds} round(s), package "
        f"{_rel(package, workdir)})"
    )
    rows = figures_rows(systems, cuts, contract, audio_seconds, args.stat, setup)
    note = (
        f"RTF: decode wall / audio seconds (audio and model loading excluded); WER pooled over "
        f"these utterances; batch_seconds {rule.batch_seconds:g};{ONE_AT_A_TIME}: one utterance "
        "per forward pass, as Speech2Text decodes."
    )
    data = figures_json(
        WORKFLOW_COLUMNS, rows, load_before=load_before, notes=[note],
        settings=settings_of(args),
    )  # fmt: skip
    stamp_rows(data, ["commit"])
    write_figures("eval_speed", data)


WORKFLOW_COLUMNS = (
    ("what", "what (script)"),
    ("asrflow", "asrflow"),
    ("against", "against"),
    ("ratio", "ratio"),
    ("goal", "goal"),
    ("commit", "commit"),
)
"""The columns of ``docs/figures/performance_workflow.json``."""


def figures_rows(
    systems: Sequence[System],
    cuts: Sequence[Any],
    contract: TextNormalization,
    audio_seconds: float,
    stat: str,
    setup: str,
) -> list[dict[str, Any]]:
    """A row of ``results/bench/eval_speed.json`` (:data:`WORKFLOW_COLUMNS`; the commit is the
    file's, filled in by ``main``) per asrflow system, against every Speech2Text system; the
    goal (at least Speech2Text beam 1's speed) on ``greedy_ctc``. ``setup``: what was decoded
    and how, the start of each row's ``what``."""
    pick = statistics.median if stat == "median" else min

    def figures(s: System) -> tuple[float, str]:
        scores = [
            score_utterance(c.id, text(c), h, contract) for c, h in zip(cuts, s.hyps, strict=True)
        ]
        wer = pooled(scores)["wer"]
        wall = pick(s.seconds)
        shown = f"RTF {wall / audio_seconds:.4f}, WER " + (
            "n/a" if wer is None else f"{100 * wer:.2f} %"
        )
        return wall, shown + (" (transcripts varied between rounds)" if s.unstable else "")

    references = [s for s in systems if s.name.startswith("Speech2Text")]
    against = {s.name: figures(s) for s in references}
    rows = []
    for s in systems:
        if s.name.startswith("Speech2Text"):
            continue
        wall, shown = figures(s)
        goal = "-"
        if s.name == "asrflow greedy_ctc":
            met = against[REFERENCE][0] / wall >= 1.0
            goal = f">= 1x {REFERENCE}'s speed: {'met' if met else 'NOT met'}"
        rows.append(
            {
                "what": f"{setup}: {s.name}, {s.dtype}",
                "asrflow": shown,
                "against": "; ".join(
                    f"{name}, float32: {fig}" for name, (_, fig) in against.items()
                ),
                "ratio": ", ".join(
                    f"{ref_wall / wall:.1f}x {name}'s speed"
                    for name, (ref_wall, _) in against.items()
                ),
                "goal": goal,
            }
        )
    return rows


def report(
    systems: Sequence[System],
    cuts: Sequence[Any],
    contract: TextNormalization,
    audio_seconds: float,
    stat: str,
) -> None:
    pick = statistics.median if stat == "median" else min
    reference = next(s for s in systems if s.name == REFERENCE)
    ref_wall = pick(reference.seconds)
    header = (
        f"{'system':30s} {'dtype':9s} {'audio s':>8s} {'wall s':>8s} {'spread s':>15s} "
        f"{'RTF':>7s} {'speed':>7s} {'WER %':>6s} {'CER %':>6s} {'!=b1':>5s} {'load s':>7s}"
    )
    print(header)
    print("-" * len(header))
    walls = {}
    for s in systems:
        wall = pick(s.seconds)
        walls[(s.name, s.dtype)] = wall
        scores = [
            score_utterance(c.id, text(c), h, contract) for c, h in zip(cuts, s.hyps, strict=True)
        ]
        totals = pooled(scores)
        differ = sum(a != b for a, b in zip(s.hyps, reference.hyps, strict=True))
        spread = f"{min(s.seconds):.3f}-{max(s.seconds):.3f}"
        wer = "n/a" if totals["wer"] is None else f"{100 * totals['wer']:.2f}"
        cer = "n/a" if totals["cer"] is None else f"{100 * totals['cer']:.2f}"
        print(
            f"{s.name:30s} {s.dtype:9s} {audio_seconds:8.1f} {wall:8.3f} {spread:>15s} "
            f"{wall / audio_seconds:7.4f} {f'x{ref_wall / wall:.2f}':>7s} {wer:>6s} {cer:>6s} "
            f"{differ:5d} {s.load_seconds:7.2f}"
            + ("  (transcripts varied between rounds)" if s.unstable else "")
        )
    print()
    print(
        "speed: x2.00 = twice as fast as Speech2Text beam 1; !=b1: transcripts that differ from "
        f"Speech2Text beam 1's; WER/CER pooled over these utterances only;{ONE_AT_A_TIME}: "
        "batch_seconds 0, one utterance per forward pass as Speech2Text decodes (the others "
        "batch as rule evaluate does); load s: building the system, not in its wall time"
    )
    for dtype in dict.fromkeys(s.dtype for s in systems if s.name == "asrflow greedy_ctc"):
        ratio = ref_wall / walls[("asrflow greedy_ctc", dtype)]
        verdict = "met" if ratio >= 1.0 else "NOT met"
        print(
            f"goal (asrflow greedy_ctc at least as fast as {REFERENCE}), {dtype}: {verdict} "
            f"(x{ratio:.2f})"
        )


if __name__ == "__main__":
    main()
