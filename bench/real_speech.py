"""Benchmark: the whole workflow on real recorded speech, one held-out speaker per fold.

Real isolated spoken digits (``../shared/corpora/fsdd4``: george, jackson, lucas, nicolas, 500
takes each, 8 kHz) are made into leave-one-speaker-out folds (:mod:`asrflow.corpus.folds`):
for held-out speaker S the other three train, every take is used exactly once, in connected
strings of 3-7 digits, and S's takes are the test set. Dev is either a seeded 12 % of each
training speaker's takes (``--dev takes``: dev shares the training speakers, so its corpus allows
speaker overlap in validation) or the training speaker after S in alphabetical order held out
whole (``--dev speaker``: train has two speakers).

One Snakemake project in ``--work`` gets one corpus (``source: nemo``) and one run
(``--recipe``, ``--seeds``, ``--override``) per fold, with the run's default tokenizer for
``--recipe auto`` (the default: a config that declares the corpus and nothing else) and a char
tokenizer for a named recipe, and the workflow runs as it does
for any user (import, validation, tokenizer, audit, smoke, train, export, evaluation,
selection, report; its output in ``<work>/snakemake.log``). Then per fold (and seed replica):
the artifact select_model chose on dev, its WER with its 95 % interval on dev and on the
held-out speaker, every artifact's held-out WER, and the train job's wall and CPU time
(Snakemake's benchmark TSV). Written to ``--out``/real_speech.json (machine, date, commit,
command, settings, rows, the mean over folds of the held-out WER) and printed as a table::

    uv run python bench/real_speech.py                      # 4 folds, every default
    uv run python bench/real_speech.py --recipe demo_conformer   # a new user's first try
    uv run python bench/real_speech.py --folds nicolas --recipe demo_conformer \\
        --override trainer.max_steps=200 --override trainer.val_check_interval=100
    uv run python bench/real_speech.py --quick              # CI smoke: one fold, a few minutes
    uv run python bench/real_speech.py --plan               # each fold's plan; nothing trains
    uv run python bench/real_speech.py --voices 100         # + 100 synthetic voices' digits
    uv run python bench/real_speech.py --table results/bench/real_speech/real_speech.json

``--voices N`` adds the ten digits spoken by N synthetic eSpeak voices
(:mod:`asrflow.corpus.voices`, joined into strings as the folds are) to every run's training, as
a second train corpus: variety of voice the three real training speakers cannot give.

Rerunning with the same ``--work`` reruns only what changed (the DAG decides; folds already
built with the same settings are kept). The figures are one run's on a shared machine: quote
them with the machine, the seed and the interval.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from asrflow import layout
from asrflow.corpus.folds import PAUSE_FILLS, Fold, FoldSettings, build_fold
from asrflow.corpus.voices import VoiceSettings, speak_takes, speaker_name
from asrflow.errors import AsrflowError
from asrflow.io import dumps_json, read_json, write_bytes, write_text
from asrflow.replicas import replica_name

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FSDD = REPO.parent / "shared/corpora/fsdd4/all.jsonl"
SPEAKERS = ("george", "jackson", "lucas", "nicolas")
RATE = 8000
RESOURCES = {"devices": 0, "cpus_per_device": 2}
VOICES = "voices"
"""The corpus of synthetic voices' digits that ``--voices N`` adds to every run's training."""
QUICK_FOLD = "nicolas"
QUICK_OVERRIDES = {
    "trainer": {"max_steps": 40, "val_check_interval": 20},
    "best_model_criterion": [["valid/loss", 1, "min"]],
}
"""--quick's training: a smoke run (blank outputs, 100 % WER, expected), two validations and one
kept checkpoint, so two artifacts to export and evaluate. The DAG's other jobs (a process each)
take most of the time. tests/test_real_speech_e2e.py runs ``--quick`` on a subset of the takes:
CI's real-audio run is this benchmark's smoke."""


@dataclass(frozen=True)
class Names:
    """The config names of one fold: its corpus, tokenizer and run."""

    speaker: str
    dev: str

    @property
    def corpus(self) -> str:
        return f"fsdd_{self.speaker}_dev{self.dev}"

    @property
    def tokenizer(self) -> str:
        return f"{self.corpus}_char"

    @property
    def run(self) -> str:
        return f"{self.speaker}_dev{self.dev}"


# --- the project ---------------------------------------------------------------------------


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["trainer.max_steps=300", "optim.lr=2e-3"]`` as nested recipe overrides (values
    parsed as YAML).

    >>> parse_overrides(["trainer.max_steps=300", "trainer.precision=auto", "specaug=null"])
    {'trainer': {'max_steps': 300, 'precision': 'auto'}, 'specaug': None}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or any(not k for k in key.split(".")):
            raise AsrflowError(f"--override {item!r}: expected dotted.key=value")
        *parents, last = key.split(".")
        node = out
        for k in parents:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise AsrflowError(f"--override {item!r}: {k} is already a value")
        node[last] = yaml.safe_load(value)
    return out


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, nested mappings merged."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def place_recipe(recipe: str, work: Path) -> str:
    """The recipe name for the config; its YAML copied to ``<work>/config/recipes/`` (where
    :func:`asrflow.layout.recipe_file` looks): a name in the repository's ``config/recipes/``,
    or a path to a YAML file (named after its stem). ``auto``, when no ``auto.yaml`` is
    shipped, is the workflow's own built-in recipe: nothing to copy."""
    shipped = REPO / layout.recipe_file(recipe)
    path = Path(recipe)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise AsrflowError(f"--recipe {recipe}: no such file")
        name, source = path.stem, path
    elif shipped.is_file():
        name, source = recipe, shipped
    elif recipe == "auto":
        return "auto"
    else:
        known = ", ".join(sorted(p.stem for p in (REPO / "config/recipes").glob("*.yaml")))
        raise AsrflowError(f"--recipe {recipe}: not a file nor a shipped recipe ({known})")
    write_bytes(work / layout.recipe_file(name), source.read_bytes())
    return name


def project_config(
    folds: dict[str, Fold],
    work: Path,
    *,
    dev: str,
    recipe: str,
    seeds: list[int] | None,
    overrides: dict[str, Any],
    decoding: str | None,
    voices: Fold | None = None,
) -> dict[str, Any]:
    """The work dir's config.yaml: one corpus and run per fold, and a char tokenizer for a
    named recipe (``auto`` takes the run's default tokenizer, ``model_type: auto``). With
    ``voices`` (a fold of synthetic speakers' takes), its train split is corpus ``voices``, a
    second train corpus of every run (dev and test stay the fold's)."""
    corpora, tokenizers, runs = {}, {}, {}
    if voices is not None:
        corpora[VOICES] = {
            "source": "nemo",
            "manifests": {"train": os.path.relpath(voices.manifests["train"], work)},
            "sampling_rate": RATE,
            "slice_fields": ["speaker"],
        }
    for speaker, fold in folds.items():
        n = Names(speaker, dev)
        manifests = {s: os.path.relpath(p, work) for s, p in fold.manifests.items()}
        corpus: dict[str, Any] = {
            "source": "nemo",
            "manifests": manifests,
            "sampling_rate": RATE,
            "slice_fields": ["speaker"],
        }
        if dev == "takes":  # dev strings are other takes of the training speakers
            corpus["validation"] = {"allow_group_overlap": ["speaker"]}
        corpora[n.corpus] = corpus
        run: dict[str, Any] = {"corpora": [n.corpus], "recipe": recipe}
        if voices is not None:
            run["corpora"].append(VOICES)
        if recipe != "auto":  # as a new user's config names one; auto: the run's default
            tokenizers[n.tokenizer] = {"corpus": n.corpus, "model_type": "char"}
            run["tokenizer"] = n.tokenizer
        run["resources"] = dict(RESOURCES)
        if overrides:
            run["overrides"] = overrides
        if seeds:
            run["seeds"] = seeds
        runs[n.run] = run
    config: dict[str, Any] = {"corpora": corpora, "tokenizers": tokenizers, "runs": runs}
    if decoding:
        config["evaluation"] = {"decoding": {"mode": decoding}}
    return config


def workflow_args(cores: int) -> list[str]:
    """Snakemake's arguments for the work dir's project: this checkout's Snakefile, the work
    dir's config.yaml, ``cores``."""
    return ["--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml",
            "--cores", str(cores)]  # fmt: skip


def workflow_env() -> dict[str, str]:
    """The environment of the workflow's processes: this checkout's library first."""
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


def run_snakemake(work: Path, cores: int) -> tuple[int, float]:
    """Run the workflow in ``work`` as tests/e2e.py does; its output to ``<work>/snakemake.log``.
    Returns its exit status and wall seconds."""
    command = [
        sys.executable, "-m", "snakemake", *workflow_args(cores),
        "--rerun-incomplete", "--keep-going",
    ]  # fmt: skip
    env = workflow_env()
    log = work / "snakemake.log"
    print(f"running the workflow in {work} (log: {log})", flush=True)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as f:
        f.write(f"$ cd {work} && PYTHONPATH={env['PYTHONPATH']} {shlex.join(command)}\n")
        f.flush()
        rc = subprocess.run(
            command, cwd=work, env=env, stdout=f, stderr=subprocess.STDOUT
        ).returncode
    return rc, time.perf_counter() - started


def print_plans(work: Path, runs: list[str], cores: int) -> int:
    """``asrflow plan`` of ``runs`` in ``work``: what ``recipe: auto`` derives for each, with
    its reasons, before anything trains. Returns its exit status."""
    command = [sys.executable, "-m", "asrflow.cli", "plan", *runs, "--", *workflow_args(cores)]
    return subprocess.run(command, cwd=work, env=workflow_env(), check=False).returncode


# --- the results ---------------------------------------------------------------------------


def _json(path: Path) -> dict[str, Any] | None:
    return read_json(path) if path.is_file() else None


def _interval(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {
        "wer": summary["wer"],
        "ci": [summary.get("wer_ci_low"), summary.get("wer_ci_high")],
        "utterances": summary.get("utterances_scored", summary.get("num_utterances")),
        "words": summary.get("ref_words"),
    }


def train_benchmark(work: Path, run: str) -> dict[str, float] | None:
    """Wall (``s``) and CPU seconds (``cpu_time``) and peak RSS of the run's train job."""
    path = work / layout.benchmark("train", run)
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        return None
    last = rows[-1]

    def number(key: str) -> float | None:
        try:
            return float(last[key])
        except (KeyError, TypeError, ValueError):
            return None

    return {"s": number("s"), "cpu_time": number("cpu_time"), "max_rss_mb": number("max_rss")}


def collect_run(work: Path, names: Names, run: str, seed: int | None) -> dict[str, Any]:
    """One row: a fold's run (or seed replica) as the workflow left it."""
    dev_set, test_set = f"{names.corpus}.dev", f"{names.corpus}.test"

    def summary(artifact: str, eval_set: str) -> dict[str, Any] | None:
        return _json(work / layout.eval_file(run, artifact, eval_set, "summary.json"))

    fold = read_json(work / "folds" / names.run / "summary.json")["splits"]
    trained = _json(work / layout.run_file(run, "train", "summary.json")) or {}
    kept = _json(work / layout.filter_report(names.corpus, "train")) or {}
    timing = train_benchmark(work, run) or {}
    row: dict[str, Any] = {
        "fold": names.speaker,
        "run": run,
        "seed": seed,
        "speakers": {s: fold[s]["speakers"] for s in ("train", "dev", "test")},
        "data": {
            "train_hours": round(kept["kept_seconds"] / 3600, 4) if kept else None,
            "train_utterances": kept.get("kept"),
            "fold": {s: {k: fold[s][k] for k in ("utterances", "seconds")} for s in fold},
        },
        "train": {
            "status": trained.get("status"),
            "steps": trained.get("steps"),
            "wall_seconds": timing.get("s"),
            "cpu_seconds": timing.get("cpu_time"),
            "max_rss_mb": timing.get("max_rss_mb"),
        },
        "selected": None,
        "dev": None,
        "test": None,
        "artifacts": {},
    }
    selected = _json(work / layout.selected_file(run))
    if selected is None:
        return row
    row["selected"] = selected["selected"]
    row["selected_sha256"] = selected.get("selected_sha256")
    row["dev"] = _interval(summary(selected["selected"], dev_set))
    row["test"] = _interval(summary(selected["selected"], test_set))
    for artifact, candidate in sorted(selected.get("candidates", {}).items()):
        test = summary(artifact, test_set)
        row["artifacts"][artifact] = {
            "dev_wer": candidate.get("wer"),
            "test_wer": None if test is None else test["wer"],
            "test_ci": None if test is None else [test.get("wer_ci_low"), test.get("wer_ci_high")],
        }
    return row


def run_names(speakers: list[str], dev: str, seeds: list[int] | None) -> list[dict[str, Any]]:
    """Every fold's run, or its seed replicas: ``names``, ``run`` and ``seed`` of each."""
    out = []
    for speaker in speakers:
        names = Names(speaker, dev)
        for seed in seeds or [None]:
            run = names.run if seed is None else replica_name(names.run, seed)
            out.append({"names": names, "run": run, "seed": seed})
    return out


def collect(work: Path, speakers: list[str], dev: str, seeds: list[int] | None) -> list[dict]:
    return [
        collect_run(work, r["names"], r["run"], r["seed"]) for r in run_names(speakers, dev, seeds)
    ]


def fold_means(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over folds of the selected artifacts' WERs (replicas of a fold averaged first).

    >>> fold_means([{"fold": "a", "dev": {"wer": 0.1}, "test": {"wer": 0.2}},
    ...             {"fold": "a", "dev": {"wer": 0.3}, "test": {"wer": 0.4}},
    ...             {"fold": "b", "dev": {"wer": 0.2}, "test": {"wer": 0.1}}])
    {'folds': 2, 'dev_wer': 0.2, 'test_wer': 0.2}
    """
    by_fold: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for split in ("dev", "test"):
            if r.get(split):
                by_fold.setdefault(r["fold"], {}).setdefault(split, []).append(r[split]["wer"])
    out: dict[str, Any] = {"folds": len(by_fold)}
    for split in ("dev", "test"):
        means = [statistics.fmean(f[split]) for f in by_fold.values() if split in f]
        out[f"{split}_wer"] = round(statistics.fmean(means), 6) if means else None
    return out


def seed_spread(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per fold with more than one seed replica: the held-out speaker's mean WER over them, its
    standard deviation and range.

    >>> seed_spread([{"fold": "a", "test": {"wer": 0.2}}, {"fold": "a", "test": {"wer": 0.3}},
    ...              {"fold": "b", "test": {"wer": 0.1}}])
    {'a': {'seeds': 2, 'mean': 0.25, 'sd': 0.070711, 'min': 0.2, 'max': 0.3}}
    """
    by_fold: dict[str, list[float]] = {}
    for r in rows:
        if r.get("test"):
            by_fold.setdefault(r["fold"], []).append(r["test"]["wer"])
    return {
        fold: {
            "seeds": len(wers),
            "mean": round(statistics.fmean(wers), 6),
            "sd": round(statistics.stdev(wers), 6),
            "min": min(wers),
            "max": max(wers),
        }
        for fold, wers in by_fold.items()
        if len(wers) > 1
    }


# --- the table -----------------------------------------------------------------------------


def _wer(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "n/a"
    lo, hi = cell.get("ci") or [None, None]
    ci = "" if lo is None or hi is None else f" [{100 * lo:.2f}, {100 * hi:.2f}]"
    return f"{100 * cell['wer']:.2f} %{ci}"


def markdown(result: dict[str, Any]) -> str:
    """The table of a real_speech.json (a row per fold and seed replica)."""
    m, s = result["machine"], result["settings"]
    extra = ""
    if s.get("seeds"):
        extra += f", seeds {', '.join(map(str, s['seeds']))}"
    if s.get("overrides"):
        extra += f", overrides {_dotted(s['overrides'])}"
    if s.get("voices"):
        v = s["voices"]
        extra += (
            f", plus the digits of {v['speakers']} synthetic voices ({v['takes']} takes each) "
            "in training"
        )
    lines = [
        f"Measured {result['date']} on {m['cpu']} ({m['threads']} threads), commit "
        f"{result['commit']}; recipe {s['recipe']}, dev {s['dev']}{extra}, decoding "
        f"{s.get('decoding') or 'auto (schema default)'}.",
        "",
        "| fold (held-out speaker) | dev WER [95 % CI] | held-out speaker WER [95 % CI] | "
        "selected | train min (wall, CPU) |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        fold = r["fold"] if r.get("seed") is None else f"{r['fold']} (seed {r['seed']})"
        wall = (r.get("train") or {}).get("wall_seconds")
        cpu = (r.get("train") or {}).get("cpu_seconds")
        minutes = "n/a" if wall is None else f"{wall / 60:.1f}"
        minutes += "" if cpu is None else f", {cpu / 60:.1f}"
        lines.append(
            f"| {fold} | {_wer(r.get('dev'))} | {_wer(r.get('test'))} | "
            f"{r.get('selected') or 'n/a'} | {minutes} |"
        )
    mean = result["mean"]

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.2f} %"

    spread = seed_spread(result["rows"])
    replicas = " (seed replicas of a fold averaged first)" if spread else ""
    lines += [
        "",
        f"Mean over {mean['folds']} fold(s) of the selected artifact{replicas}: dev "
        f"{pct(mean['dev_wer'])}, held-out speaker {pct(mean['test_wer'])}.",
    ]
    if spread:
        cells = [
            f"{fold} {pct(x['mean'])} (sd {100 * x['sd']:.2f}, {pct(x['min'])} to "
            f"{pct(x['max'])}, {x['seeds']} seeds)"
            for fold, x in spread.items()
        ]
        lines += ["", "Held-out speaker WER over seeds, per fold: " + "; ".join(cells) + "."]
    earlier = _earlier_rows(result)
    if earlier:
        lines += ["", "Rows measured by an earlier run of the benchmark: " + earlier + "."]
    if result.get("notes"):  # what the run's conditions were, added by whoever kept the file
        lines += ["", str(result["notes"])]
    return "\n".join(lines)


def _earlier_rows(result: dict[str, Any]) -> str:
    """The folds whose rows another run measured (a file merged from two runs: such rows carry
    their own ``commit`` and ``date``), e.g. ``lucas, nicolas (commit c289af8, 2026-12-06)``.

    >>> _earlier_rows({"commit": "b" * 40, "rows": [{"fold": "a", "commit": "c" * 40,
    ...     "date": "2026-12-05"}, {"fold": "a", "commit": "c" * 40, "date": "2026-12-05"},
    ...     {"fold": "z"}]})
    'a (commit ccccccc, 2026-12-05)'
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for r in result["rows"]:
        if r.get("commit") and r["commit"] != result["commit"]:
            folds = groups.setdefault((r["commit"][:7], r.get("date", "")), [])
            if r["fold"] not in folds:
                folds.append(r["fold"])
    return "; ".join(
        f"{', '.join(folds)} (commit {commit}, {date})" for (commit, date), folds in groups.items()
    )


def _dotted(tree: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for k, v in tree.items():
        if isinstance(v, dict):
            parts.append(_dotted(v, f"{prefix}{k}."))
        else:
            parts.append(f"{prefix}{k}={v}")
    return " ".join(parts)


def _machine() -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from figures import commit, machine

    return {
        "machine": {
            "cpu": machine(),
            "cores": os.cpu_count(),
            "threads": RESOURCES["cpus_per_device"],  # the train job's (OMP_NUM_THREADS)
        },
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
    }


# --- main ----------------------------------------------------------------------------------


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folds", type=_list, default=list(SPEAKERS), help="held-out speakers")
    p.add_argument("--dev", choices=("takes", "speaker"), default="takes")
    p.add_argument(
        "--recipe",
        default="auto",
        help="auto (the workflow's default, with its default tokenizer; the default here), a "
        "recipe of config/recipes/ or a YAML file (each with a char tokenizer)",
    )
    p.add_argument("--seeds", type=_list, help="seed replicas, e.g. 0,1")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recipe override, e.g. trainer.max_steps=300 (repeatable; values are YAML)",
    )
    p.add_argument("--decoding", choices=("greedy_ctc", "beam", "lexicon_lm", "auto"))
    p.add_argument("--work", type=Path, default=REPO / "results/bench/real_speech/work")
    p.add_argument("--out", type=Path, default=REPO / "results/bench/real_speech")
    p.add_argument("--source", type=Path, default=FSDD, help="the takes' NeMo manifest")
    p.add_argument("--cores", type=int, default=2, help="snakemake --cores")
    p.add_argument("--fold-seed", type=int, default=0, help="seed of the folds' strings")
    p.add_argument(
        "--voices",
        type=int,
        default=0,
        metavar="N",
        help="add the ten digits spoken by N synthetic eSpeak voices (3 takes each, joined into "
        "strings as the folds are) to every run's training (asrflow.corpus.voices; 0: none)",
    )
    p.add_argument(
        "--voice-seed",
        type=int,
        help="seed of the --voices draw (voices, channels, takes; default: --fold-seed): a "
        "replica over voice draws, in a --work of its own",
    )
    add_pause_fill(p)
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"CI smoke: fold {QUICK_FOLD} only, {_dotted(QUICK_OVERRIDES)} (before --override)",
    )
    p.add_argument("--table", type=Path, help="print the table of a real_speech.json, run nothing")
    p.add_argument(
        "--plan",
        action="store_true",
        help="write the project and print every run's plan (asrflow plan: the data stages run, "
        "nothing trains)",
    )
    args = p.parse_args(argv)
    for speaker in args.folds:
        if speaker not in SPEAKERS and args.source == FSDD:
            p.error(f"--folds: {speaker!r} is not one of {', '.join(SPEAKERS)}")
    args.seeds = [int(s) for s in args.seeds] if args.seeds else None
    if args.quick:
        args.folds = [QUICK_FOLD]
    return args


def add_pause_fill(p: argparse.ArgumentParser) -> None:
    """``--pause-fill`` (:attr:`FoldSettings.pause_fill`), for every benchmark that builds folds."""
    p.add_argument(
        "--pause-fill",
        choices=PAUSE_FILLS,
        default=FoldSettings.pause_fill,
        help="what the pauses between takes hold: digital silence or the takes' room tone",
    )


def fold_settings(args: argparse.Namespace, speaker: str) -> FoldSettings:
    return FoldSettings(
        held_out=speaker,
        dev=args.dev,
        sample_rate=RATE,
        seed=args.fold_seed,
        pause_fill=args.pause_fill,
    )


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.table:
        print(markdown(read_json(args.table)))
        return 0
    overrides = merge(QUICK_OVERRIDES if args.quick else {}, parse_overrides(args.override))
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    recipe = place_recipe(args.recipe, work)
    folds = {
        s: build_fold(
            args.source,
            work / "folds" / Names(s, args.dev).run,
            fold_settings(args, s),
        )
        for s in args.folds
    }
    config = project_config(
        folds,
        work,
        dev=args.dev,
        recipe=recipe,
        seeds=args.seeds,
        overrides=overrides,
        decoding=args.decoding,
        voices=voices_fold(args, work) if args.voices else None,
    )
    write_text(work / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    if args.plan:
        runs = [r["run"] for r in run_names(args.folds, args.dev, args.seeds)]
        return print_plans(work, runs, args.cores)
    rc, wall = run_snakemake(work, args.cores)
    rows = collect(work, args.folds, args.dev, args.seeds)
    result = {
        **_machine(),
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "settings": {
            "folds": args.folds,
            "dev": args.dev,
            "recipe": recipe,
            "recipe_arg": args.recipe,
            "seeds": args.seeds,
            "overrides": overrides,
            "decoding": args.decoding,
            "voices": asdict(voice_settings(args)) if args.voices else None,
            "quick": args.quick,
            "cores": args.cores,
            "source": str(args.source),
            "fold": {k: v for k, v in asdict(fold_settings(args, "")).items() if k != "held_out"},
            "work": str(work),
        },
        "snakemake": {"returncode": rc, "wall_seconds": round(wall, 1)},
        "rows": rows,
        "mean": fold_means(rows),
    }
    return finish(args.out / "real_speech.json", result, markdown(result), work)


def voice_settings(args: argparse.Namespace) -> VoiceSettings:
    seed = args.fold_seed if args.voice_seed is None else args.voice_seed
    return VoiceSettings(speakers=args.voices, takes=3, sample_rate=RATE, seed=seed)


def voices_fold(args: argparse.Namespace, work: Path) -> Fold:
    """The synthetic speakers' takes joined into strings like a fold's (the first speaker's
    test strings and a fifth of the others' takes as dev are left out of training: only the
    train split is used)."""
    takes = speak_takes(work / "voices" / "takes", voice_settings(args))
    settings = FoldSettings(
        held_out=speaker_name(0),
        dev_fraction=0.2,
        sample_rate=RATE,
        seed=args.fold_seed,
        pause_fill=args.pause_fill,
    )
    return build_fold(takes, work / "folds" / VOICES, settings)


def finish(out: Path, result: dict[str, Any], table: str, work: Path) -> int:
    """Write ``result`` to ``out``, print its ``table``, and return the workflow's exit status
    (``result["snakemake"]["returncode"]``), saying where its log is when it failed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, dumps_json(result))
    print(table)
    rc = result["snakemake"]["returncode"]
    if rc != 0:
        print(f"snakemake failed (exit {rc}); see {work / 'snakemake.log'}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AsrflowError as e:  # a bad argument or corpus: the message says what to fix
        print(f"real_speech: {e}", file=sys.stderr)
        raise SystemExit(2) from None
