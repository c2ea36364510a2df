"""Benchmark: fine-tuning the model you have, on real speech from speakers it never heard.

A base model is trained on the synthetic demo corpus (eSpeak, 16 kHz; ``demo_conformer``, the
README's main job). Then one fold of ``../shared/corpora/fsdd4`` (real recorded digits, 8 kHz:
three speakers train, the fourth is the test set; :mod:`asrflow.corpus.folds`, as
``bench/real_speech.py`` builds them) is learned four ways, each with ``recipe: auto`` and the
same update budget (the plan's, from the fold's hours):

- ``scratch``: from a fresh initialisation, the run's default tokenizer (what
  ``bench/real_speech.py`` measures);
- ``full``: ``init: {run: base}``: every weight trains, the plan's fine-tuning LR
  (:func:`asrflow.recipe.rules.fine_tuning`), and the fold's own tokenizer (the scratch run's):
  the base's cannot spell "zero" (the demo corpus has no z), which ``tokenizer: init`` reports
  and the smoke run refuses, so the output layers start fresh (``init.vocabulary``);
- ``frozen``: the same with ``init.freeze: [frontend, normalize, encoder]`` (only the CTC output
  layer trains);
- ``lora``: the same with ``init.adapter`` (LoRA on the attention and feed-forward layers).

Per run: the artifact ``select_model`` chose on dev, its WER with its 95 % interval on dev and on
the held-out speaker, the trainable parameters, the exported ``model.pth`` size and the train
job's wall and CPU time. Written to ``--out``/fine_tuning.json (machine, date, commit, command,
settings, rows) and printed as a table::

    uv run python bench/fine_tuning.py                     # ~40 min on 2 cores
    uv run python bench/fine_tuning.py --lr-shares 10,3,1  # and full, lora at other peak LRs
    uv run python bench/fine_tuning.py --seeds 0,1,2       # seed replicas of each
    uv run python bench/fine_tuning.py --lr-shares 3 --ways scratch,full_1of3 --seeds 1,2
    uv run python bench/fine_tuning.py --table docs/figures/fine_tuning.json

One seed and one fold: differences within the intervals mean nothing without seed replicas.
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
from asrflow.corpus.folds import build_fold
from asrflow.errors import AsrflowError
from asrflow.io import read_json, write_text
from asrflow.project import AUTO_TOKENIZER
from asrflow.recipe.load import read_recipe_yaml
from asrflow.replicas import replica_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_speech import (  # a sibling script, not a package
    FSDD,
    RESOURCES,
    SPEAKERS,
    Names,
    _interval,
    _json,
    _list,
    _machine,
    _wer,
    add_pause_fill,
    finish,
    fold_settings,
    parse_overrides,
    place_recipe,
    project_config,
    run_snakemake,
    seed_spread,
    train_benchmark,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BASE = "base"
DEMO = "demo"
WAYS: dict[str, dict[str, Any] | None] = {
    "scratch": None,
    "full": {"run": BASE},
    "frozen": {"run": BASE, "freeze": ["frontend", "normalize", "encoder"]},
    "lora": {
        "run": BASE,
        "adapter": {"rank": 8, "alpha": 16, "targets": ["linear_q", "linear_v", "w_1", "w_2"]},
    },
}
"""The runs on the fold, by their ``init`` (``None``: from scratch)."""
SWEPT = ("full", "lora")
"""The ways ``--lr-shares`` repeats at other peak learning rates."""


def ways(shares: list[int]) -> dict[str, dict[str, Any] | None]:
    """:data:`WAYS`, and for each ``N`` of ``shares`` a copy of each of :data:`SWEPT` named
    ``<way>_1of<N>`` that trains at 1/N of the base's peak LR (the plan's own share is 1/3,
    :data:`asrflow.recipe.rules.NEW_VOCABULARY_SHARE`)."""
    out = dict(WAYS)
    for n in shares:
        out.update({f"{way}_1of{n}": WAYS[way] for way in SWEPT})
    return out


def way_of(run: str) -> str:
    """The way a run learns the fold: its name without a replica's ``-seed<N>``."""
    return run.partition("-seed")[0]


def _ints(text: str) -> list[int]:
    return [int(n) for n in _list(text)]


def init_of(run: str) -> dict[str, Any] | None:
    """The ``init`` of a run on the fold: its way's in :data:`WAYS` (a swept copy's or a
    replica's too)."""
    return WAYS[way_of(run).partition("_1of")[0]]


def lr_share(run: str) -> int | None:
    """N of a run ``<way>_1of<N>`` of :func:`ways` (or a replica of it), else None (the plan's
    LR)."""
    _, sep, n = way_of(run).rpartition("_1of")
    return int(n) if sep and n.isdigit() else None


def only_ways(every: dict[str, Any], chosen: list[str] | None) -> dict[str, Any]:
    """``every`` (way -> spec), only the ``chosen`` ways (``--ways``) when given, in its order."""
    if not chosen:
        return every
    unknown = [w for w in chosen if w not in every]
    if unknown:
        raise AsrflowError(f"--ways {', '.join(unknown)}: not one of {', '.join(every)}")
    return {w: every[w] for w in every if w in chosen}


def replica_runs(names: list[str], seeds: list[int] | None) -> list[str]:
    """The runs as the workflow names them: each of ``names``, or its replicas
    ``<name>-seed<N>`` with ``seeds``."""
    return [
        run if seed is None else replica_name(run, seed)
        for run in names
        for seed in seeds or [None]
    ]


def chosen_ways(args: argparse.Namespace) -> dict[str, dict[str, Any] | None]:
    """:func:`ways`, only those ``--ways`` names when it is given."""
    return only_ways(ways(args.lr_shares), args.ways)


def fold_runs(args: argparse.Namespace) -> list[str]:
    """The runs on the fold as the workflow names them (replicas: ``<way>-seed<N>``)."""
    return replica_runs(list(chosen_ways(args)), args.seeds)


def base_peak_lr(base: dict[str, Any], work: Path) -> float:
    """The base run's peak LR: its override, else its recipe file's ``optim.lr``."""
    overridden = ((base.get("overrides") or {}).get("optim") or {}).get("lr")
    if overridden is not None:
        return float(overridden)
    return float(read_recipe_yaml(work / layout.recipe_file(base["recipe"]))["optim"]["lr"])


def project(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """config.yaml: the demo corpus and base run as config/config.yaml has them, one fold of
    fsdd4, and a run on it for each of :data:`WAYS`."""
    shipped = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    fold = build_fold(args.source, work / "folds" / args.fold, fold_settings(args, args.fold))
    names = Names(args.fold, args.dev)
    config = project_config(
        {args.fold: fold}, work, dev=args.dev, recipe="auto", seeds=args.seeds, overrides={},
        decoding=args.decoding,
    )  # fmt: skip
    (template,) = config["runs"].values()
    base = dict(shipped["runs"]["demo_ctc"], resources=dict(RESOURCES))
    base["recipe"] = place_recipe(base["recipe"], work)  # config/recipes/ of the work dir
    if args.base_override:
        base["overrides"] = parse_overrides(args.base_override)
    runs: dict[str, Any] = {BASE: base}
    tokenizer = AUTO_TOKENIZER.format(corpus=names.corpus)  # scratch's default
    for way, init in chosen_ways(args).items():
        fine_tuned = {"init": init, "tokenizer": tokenizer} if init else {}
        runs[way] = copy.deepcopy({**template, **fine_tuned})
        if (n := lr_share(way)) is not None:
            lr = float(f"{base_peak_lr(base, work) / n:.3g}")
            overrides = runs[way].setdefault("overrides", {})
            overrides["optim"] = {**overrides.get("optim", {}), "lr": lr}
    config["corpora"] = {DEMO: shipped["corpora"][DEMO], **config["corpora"]}
    config["tokenizers"] = {
        **shipped["tokenizers"],
        tokenizer: {"corpus": names.corpus, "model_type": "auto"},
    }
    config["runs"] = runs
    config["text_normalization"] = shipped["text_normalization"]
    config["evaluation"] = {**shipped.get("evaluation", {}), **config.get("evaluation", {})}
    config["evaluation"].pop("extra_sets", None)
    config["report"] = {"baseline_run": "scratch"}
    assert names.corpus in config["corpora"]
    return config


def collect_way(work: Path, names: Names, run: str) -> dict[str, Any]:
    """One row: the run as the workflow left it."""
    trained = _json(work / layout.run_file(run, "train", "summary.json")) or {}
    timing = train_benchmark(work, run) or {}
    init = trained.get("init") or {}
    row: dict[str, Any] = {
        "run": run,
        "init": init_of(run),
        "status": trained.get("status"),
        "steps": trained.get("steps"),
        "peak_lr": ((trained.get("recipe_settings") or {}).get("optim") or {}).get("lr"),
        "parameters": trained.get("num_parameters"),
        "trainable_parameters": trained.get("trainable_parameters"),
        "output_layers": (init.get("vocabulary") or {}).get("output_layers"),
        "wall_seconds": timing.get("s"),
        "cpu_seconds": timing.get("cpu_time"),
        "selected": None,
        "export_bytes": None,
        "dev": None,
        "test": None,
    }
    selected = _json(work / layout.selected_file(run))
    if selected is None:
        return row
    artifact = selected["selected"]
    weights = work / layout.run_file(run, "export", artifact) / "model.pth"
    row.update(
        selected=artifact,
        export_bytes=weights.stat().st_size if weights.is_file() else None,
        dev=_interval(_json(work / layout.eval_file(run, artifact, f"{names.corpus}.dev",
                                                     "summary.json"))),
        test=_interval(_json(work / layout.eval_file(run, artifact, f"{names.corpus}.test",
                                                      "summary.json"))),
    )  # fmt: skip
    return row


def markdown(result: dict[str, Any]) -> str:
    """The table of a fine_tuning.json."""
    s = result["settings"]
    lines = [
        f"{measured(result)}; fold: held-out {s['fold']}, dev {s['dev']}; base: demo_conformer "
        f"on the demo corpus{'; ' + ' '.join(s['base_override']) if s['base_override'] else ''}.",
        "",
        "| run | start | dev WER [95 % CI] | held-out speaker WER [95 % CI] | trainable "
        "parameters | export MB | peak LR | train min (wall, CPU) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        start = "fresh" if not r["init"] else ", ".join(
            f"{k}: {v}" for k, v in r["init"].items() if k != "run"
        ) or "base, all weights"  # fmt: skip
        if (n := lr_share(r["run"])) is not None:
            start += f"; lr 1/{n} of base's"
        trainable = r.get("trainable_parameters")
        size = r.get("export_bytes")
        lines.append(
            f"| {r['run']} | {start} | {_wer(r.get('dev'))} | {_wer(r.get('test'))} | "
            f"{'n/a' if trainable is None else f'{trainable:,}'} | "
            f"{'n/a' if size is None else f'{size / 1e6:.2f}'} | "
            f"{'n/a' if r.get('peak_lr') is None else f'{r["peak_lr"]:.3g}'} | {minutes(r)} |"
        )
    spread = seed_spread([{**r, "fold": way_of(r["run"])} for r in result["rows"]])
    return "\n".join(lines + footer(spread, result.get("notes")))


def measured(result: dict[str, Any]) -> str:
    """ "Measured <date> on <cpu> (<n> threads), commit <commit>" of a benchmark's result."""
    m = result["machine"]
    when, commit = result["date"], result["commit"]
    return f"Measured {when} on {m['cpu']} ({m['threads']} threads), commit {commit}"


def minutes(row: dict[str, Any]) -> str:
    """A row's train job time as "wall, CPU" minutes."""
    wall, cpu = row.get("wall_seconds"), row.get("cpu_seconds")
    text = "n/a" if wall is None else f"{wall / 60:.1f}"
    return text + ("" if cpu is None else f", {cpu / 60:.1f}")


def footer(spread: dict[str, dict[str, float]], notes: str | None) -> list[str]:
    """The lines below a table: the held-out WER over seeds of each way with replicas
    (:func:`real_speech.seed_spread`), then the notes whoever kept the file added."""
    lines = []
    if spread:
        cells = [
            f"{way} {100 * x['mean']:.2f} % (sd {100 * x['sd']:.2f}, {x['seeds']} seeds)"
            for way, x in spread.items()
        ]
        lines += ["", "Held-out speaker WER over seeds: " + "; ".join(cells) + "."]
    return lines + (["", str(notes)] if notes else [])


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fold", default="nicolas", choices=SPEAKERS, help="held-out speaker")
    p.add_argument("--dev", choices=("takes", "speaker"), default="takes")
    p.add_argument("--decoding", choices=("greedy_ctc", "beam", "lexicon_lm", "auto"))
    p.add_argument(
        "--base-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of the base run's recipe, e.g. trainer.max_steps=1200 (repeatable)",
    )
    p.add_argument(
        "--seeds",
        type=_ints,
        metavar="N,...",
        help="seed replicas of every run on the fold, e.g. 0,1,2 (the base: one)",
    )
    p.add_argument(
        "--ways",
        type=_list,
        metavar="WAY,...",
        help="only these runs on the fold (the base always), e.g. scratch,full_1of3",
    )
    p.add_argument("--work", type=Path, default=REPO / "results/bench/fine_tuning/work")
    p.add_argument("--out", type=Path, default=REPO / "results/bench/fine_tuning")
    p.add_argument("--source", type=Path, default=FSDD, help="the takes' NeMo manifest")
    p.add_argument("--cores", type=int, default=2, help="snakemake --cores")
    p.add_argument("--fold-seed", type=int, default=0, help="seed of the fold's strings")
    p.add_argument(
        "--lr-shares",
        type=_ints,
        default=[],
        metavar="N,...",
        help="also train full and lora at 1/N of the base's peak LR for each N, e.g. 10,3,1 "
        "(the plan's fine-tuning LR is 1/3)",
    )
    add_pause_fill(p)
    p.add_argument("--table", type=Path, help="print the table of a fine_tuning.json, run nothing")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.table:
        print(markdown(read_json(args.table)))
        return 0
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = project(args, work)
    write_text(work / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    rc, wall = run_snakemake(work, args.cores)
    names = Names(args.fold, args.dev)
    result = {
        **_machine(),
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "settings": {
            "fold": args.fold,
            "dev": args.dev,
            "decoding": args.decoding,
            "base_override": args.base_override,
            "cores": args.cores,
            "fold_seed": args.fold_seed,
            "lr_shares": args.lr_shares,
            "seeds": args.seeds,
            "ways": args.ways,
            "work": str(work),
        },
        "snakemake": {"returncode": rc, "wall_seconds": round(wall, 1)},
        "rows": [collect_way(work, names, run) for run in fold_runs(args)],
    }
    return finish(args.out / "fine_tuning.json", result, markdown(result), work)


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AsrflowError as e:
        print(f"fine_tuning: {e}", file=sys.stderr)
        raise SystemExit(2) from None
