"""Benchmark: the weekly loop on real speech. Last week's model is fine-tuned on this week's
audio (with last week's beside it), against retraining from scratch on everything.

Two corpora of ``../shared/corpora/fsdd4`` (real recorded digits, 8 kHz, connected into strings
as ``bench/real_speech.py`` builds its folds, :mod:`asrflow.corpus.folds`), both holding the same
speaker out as their test set (the next caller):

- ``week1``: two speakers train (dev: held-out takes of theirs);
- ``week2``: a third speaker arrives (``--new-speaker``; dev: held-out takes of theirs).

Runs, every one ``recipe: auto`` (the plan derives model, budget and LR from its corpora):

- ``base``: week 1 from scratch: last week's model;
- ``child``: ``init: {run: base}`` on ``[week2, week1]`` (this week's audio and a rehearsal of
  last week's), the base's own tokenizer (the vocabulary is kept), the plan's fine-tuning LR
  (:func:`asrflow.recipe.rules.fine_tuning`: 1/3 of the base's peak; 1/30 until rules version 4);
- ``child_1of<N>``: the same at 1/N of the base's peak (``--lr-shares``);
- ``new_only``: the child without the rehearsal (``[week2]`` only): what forgetting costs;
- ``scratch``: from a fresh initialisation on ``[week1, week2]``: what the loop replaces.

Per run: the artifact ``select_model`` chose on its dev sets, its WER with its 95 % interval on
the held-out speaker (``week1.test``), on last week's speakers' held-out takes (``week1.dev``)
and on the new speaker's (``week2.dev``), the peak LR, steps and the train job's time. Written
to ``--out``/weekly_loop.json (machine, date, commit, command, settings, rows) and printed as a
table::

    uv run python bench/weekly_loop.py                       # ~40 min on 2 cores
    uv run python bench/weekly_loop.py --lr-shares 10,3      # and the child at other peak LRs
    uv run python bench/weekly_loop.py --table docs/figures/weekly_loop.json

One seed and one split of the speakers: differences within the intervals mean nothing without
seed replicas (``--seeds``).
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from asrflow import layout
from asrflow.corpus.folds import Fold, build_fold, select_takes
from asrflow.errors import AsrflowError
from asrflow.io import read_json, write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fine_tuning import (  # sibling scripts, not a package
    _ints,
    footer,
    lr_share,
    measured,
    minutes,
    only_ways,
    replica_runs,
    way_of,
)
from real_speech import (
    FSDD,
    SPEAKERS,
    _interval,
    _json,
    _list,
    _machine,
    _wer,
    add_pause_fill,
    finish,
    fold_settings,
    project_config,
    run_snakemake,
    seed_spread,
    train_benchmark,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BASE = "base"
WEEKS = ("week1", "week2")
HELD_OUT = f"{WEEKS[0]}.test"
"""The held-out speaker's eval set (week 2's test split holds the same strings)."""
JUDGED = (HELD_OUT, f"{WEEKS[0]}.dev", f"{WEEKS[1]}.dev")
"""The eval sets every run is evaluated on (``evaluation.extra_sets``) and the table shows."""
WAYS: dict[str, dict[str, Any]] = {
    "child": {"init": {"run": BASE}, "corpora": ["week2", "week1"]},
    "new_only": {"init": {"run": BASE}, "corpora": ["week2"]},
    "scratch": {"corpora": ["week1", "week2"]},
}
"""This week's runs: their ``init`` (none: from scratch) and corpora."""


def ways(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """:data:`WAYS` with a ``child_1of<N>`` for each ``--lr-shares`` N; only ``--ways`` when
    given."""
    every = dict(WAYS)
    every.update({f"child_1of{n}": WAYS["child"] for n in args.lr_shares})
    return only_ways(every, args.ways)


def week_runs(args: argparse.Namespace) -> list[str]:
    """This week's runs as the workflow names them (replicas: ``<way>-seed<N>``)."""
    return replica_runs(list(ways(args)), args.seeds)


def speakers_of(args: argparse.Namespace) -> dict[str, list[str]]:
    """The speakers whose takes each week's corpus is built from (its test speaker included)."""
    if args.new_speaker == args.held_out:
        raise AsrflowError(f"--new-speaker {args.new_speaker} is the held-out speaker")
    old = [s for s in SPEAKERS if s not in (args.new_speaker, args.held_out)]
    return {"week1": [*old, args.held_out], "week2": [args.new_speaker, args.held_out]}


def week_fold(args: argparse.Namespace, work: Path, week: str, speakers: list[str]) -> Fold:
    """One week's corpus: the takes of ``speakers`` as a fold holding out ``--held-out``."""
    takes = select_takes(
        args.source,
        work / "folds" / f"{week}.takes.jsonl",
        lambda row: row.get("speaker") in speakers,
        what=f"takes of {', '.join(speakers)}",
    )
    return build_fold(takes, work / "folds" / week, fold_settings(args, args.held_out))


def project(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """config.yaml: the two weeks' corpora, the base on week 1 and this week's runs."""
    folds = {w: week_fold(args, work, w, s) for w, s in speakers_of(args).items()}
    config = project_config(
        folds, work, dev=args.dev, recipe="auto", seeds=None, overrides={}, decoding=args.decoding
    )
    generated = list(config["runs"].values())
    template = {k: v for k, v in generated[0].items() if k != "corpora"}
    config["corpora"] = {
        week: corpus for week, corpus in zip(WEEKS, config["corpora"].values(), strict=True)
    }
    runs: dict[str, Any] = {BASE: {**copy.deepcopy(template), "corpora": ["week1"]}}
    for way, spec in ways(args).items():
        runs[way] = {**copy.deepcopy(template), **copy.deepcopy(spec)}
        if args.seeds:
            runs[way]["seeds"] = list(args.seeds)
    config["runs"] = runs
    # every run on the same sets: the held-out speaker and each week's dev takes (a run's own
    # sets are its first corpus's dev and its corpora's test splits)
    config["evaluation"] = {**config.get("evaluation", {}), "extra_sets": list(JUDGED)}
    config["report"] = {"baseline_run": BASE}
    return config


def with_lr_shares(config: dict[str, Any], work: Path) -> dict[str, Any]:
    """Each ``child_1of<N>`` with ``optim.lr`` = 1/N of the base's peak, which the plan derives
    from week 1: read from the base's plan (``results/runs/base/plan/plan.json``, which the
    first pass of :func:`main` writes)."""
    swept = [run for run in config["runs"] if lr_share(run) is not None]
    if not swept:
        return config
    plan = _json(work / layout.plan_file(BASE))
    if plan is None:
        raise AsrflowError(f"{BASE}'s plan is not written; see {work / 'snakemake.log'}")
    peak = float(plan["values"]["optim"]["lr"])
    out = copy.deepcopy(config)
    for run in swept:
        lr = float(f"{peak / lr_share(run):.3g}")
        overrides = out["runs"][run].setdefault("overrides", {})
        overrides["optim"] = {**overrides.get("optim", {}), "lr": lr}
    return out


def without_lr_shares(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the ``child_1of<N>`` runs: the first pass, which plans the base."""
    runs = {n: r for n, r in config["runs"].items() if lr_share(n) is None}
    return {**config, "runs": runs}


def collect_way(work: Path, run: str, corpora: list[str]) -> dict[str, Any]:
    """One row: a run (training on ``corpora``) as the workflow left it."""
    trained = _json(work / layout.run_file(run, "train", "summary.json")) or {}
    timing = train_benchmark(work, run) or {}
    row: dict[str, Any] = {
        "run": run,
        "init": (trained.get("init") or {}).get("run"),
        "corpora": corpora,
        "status": trained.get("status"),
        "steps": trained.get("steps"),
        "peak_lr": ((trained.get("recipe_settings") or {}).get("optim") or {}).get("lr"),
        "wall_seconds": timing.get("s"),
        "cpu_seconds": timing.get("cpu_time"),
        "selected": None,
        "eval": {},
    }
    selected = _json(work / layout.selected_file(run))
    if selected is None:
        return row
    artifact = row["selected"] = selected["selected"]
    for eval_set in JUDGED:
        summary = _json(work / layout.eval_file(run, artifact, eval_set, "summary.json"))
        row["eval"][eval_set] = _interval(summary)
    return row


def markdown(result: dict[str, Any]) -> str:
    """The table of a weekly_loop.json."""
    s = result["settings"]
    lines = [
        f"{measured(result)}; held-out speaker {s['held_out']}, week 2 adds {s['new_speaker']}; "
        f"dev {s['dev']}.",
        "",
        "| run | start | trains on | held-out speaker WER [95 % CI] | week 1 dev | week 2 dev "
        "| peak LR | steps | train min (wall, CPU) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        start = "fresh" if not r["init"] else f"{r['init']}'s selected model"
        if (n := lr_share(r["run"])) is not None:
            start += f"; lr 1/{n} of its peak"
        corpora = ", ".join(r["corpora"])
        cells = [_wer(r["eval"].get(k)) for k in JUDGED]
        lines.append(
            f"| {r['run']} | {start} | {corpora} | {' | '.join(cells)} | "
            f"{'n/a' if r.get('peak_lr') is None else f'{r["peak_lr"]:.3g}'} | "
            f"{r.get('steps') or 'n/a'} | {minutes(r)} |"
        )
    spread = seed_spread(
        [{"fold": way_of(r["run"]), "test": r["eval"].get(HELD_OUT)} for r in result["rows"]]
    )
    return "\n".join(lines + footer(spread, result.get("notes")))


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--held-out", default="nicolas", choices=SPEAKERS, help="the test speaker")
    p.add_argument(
        "--new-speaker", default="lucas", choices=SPEAKERS, help="the speaker week 2 adds"
    )
    p.add_argument("--dev", choices=("takes", "speaker"), default="takes")
    p.add_argument("--decoding", choices=("greedy_ctc", "beam", "lexicon_lm", "auto"))
    p.add_argument(
        "--lr-shares",
        type=_ints,
        default=[],
        metavar="N,...",
        help="also train the child at 1/N of the base's peak LR for each N, e.g. 30,10 "
        "(the plan's is 1/3)",
    )
    p.add_argument("--ways", type=_list, metavar="WAY,...", help="only these of this week's runs")
    p.add_argument("--seeds", type=_ints, metavar="N,...", help="seed replicas of this week's runs")
    p.add_argument("--work", type=Path, default=REPO / "results/bench/weekly_loop/work")
    p.add_argument("--out", type=Path, default=REPO / "results/bench/weekly_loop")
    p.add_argument("--source", type=Path, default=FSDD, help="the takes' NeMo manifest")
    p.add_argument("--cores", type=int, default=2, help="snakemake --cores")
    p.add_argument("--fold-seed", type=int, default=0, help="seed of the strings")
    add_pause_fill(p)
    p.add_argument("--table", type=Path, help="print the table of a weekly_loop.json, run nothing")
    return p.parse_args(argv)


def _write_config(work: Path, config: dict[str, Any]) -> None:
    write_text(work / "config.yaml", yaml.safe_dump(config, sort_keys=False))


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.table:
        print(markdown(read_json(args.table)))
        return 0
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = project(args, work)
    rc = 0
    if any(lr_share(run) is not None for run in config["runs"]):
        _write_config(work, without_lr_shares(config))  # plans (and trains) the base first
        rc, _ = run_snakemake(work, args.cores)
        (work / "snakemake.log").replace(work / "snakemake.first.log")  # the second pass's
        config = with_lr_shares(config, work)
    _write_config(work, config)
    rc2, wall = run_snakemake(work, args.cores)
    result = {
        **_machine(),
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "settings": {
            "held_out": args.held_out,
            "new_speaker": args.new_speaker,
            "dev": args.dev,
            "decoding": args.decoding,
            "cores": args.cores,
            "fold_seed": args.fold_seed,
            "lr_shares": args.lr_shares,
            "seeds": args.seeds,
            "ways": args.ways,
            "work": str(work),
        },
        "snakemake": {"returncode": rc or rc2, "wall_seconds": round(wall, 1)},
        "rows": [
            collect_way(work, run, config["runs"][way_of(run)]["corpora"])
            for run in [BASE, *week_runs(args)]
        ],
    }
    return finish(args.out / "weekly_loop.json", result, markdown(result), work)


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AsrflowError as e:
        print(f"weekly_loop: {e}", file=sys.stderr)
        raise SystemExit(2) from None
