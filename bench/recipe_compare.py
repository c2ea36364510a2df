"""Two recipes on the demo corpus, each with seed replicas: the config's own run against
``recipe: auto``.

Writes a project in ``--work`` whose config is ``config/config.yaml`` with its runs replaced by
two: the config's first run as shipped (``demo_ctc``: ``demo_conformer``, the demo's unigram
tokenizer) and ``demo_auto`` (the demo corpus and nothing else: ``recipe: auto``, its default
tokenizer), both with ``seeds``. It runs the whole workflow (the report's baseline is the first
run), then reads ``results/report/replicas.csv``: per run and eval set the mean WER of the
artifacts the replicas selected on dev, its interval over utterances and seeds, the spread over
seeds, and the difference to the baseline's replicas with its paired interval.

    uv run python bench/recipe_compare.py                      # 2 recipes x 3 seeds, ~50 min
    uv run python bench/recipe_compare.py --collect --work W   # the figures of a finished project
    uv run python bench/figures.py results/bench/recipe_compare.json   # the table

The figures go to ``results/bench/recipe_compare.json`` (:mod:`figures`), the table of
``docs/recipes.md``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from figures import figures_json, load, settings_of, write_figures  # noqa: E402
from real_speech import place_recipe, run_snakemake  # noqa: E402

from asrflow.io import read_json, write_text  # noqa: E402
from asrflow.replicas import replica_name  # noqa: E402

AUTO_RUN = "demo_auto"
REPLICAS = Path("results/report/replicas.csv")
COLUMNS = [
    ("run", "run"),
    ("recipe", "recipe"),
    ("eval_set", "eval set"),
    ("seeds", "seeds"),
    ("wer", "mean WER [95 % CI]"),
    ("spread", "sd (min-max) over seeds"),
    ("diff", "vs the first run [95 % CI]"),
    ("selected", "selected"),
    ("steps", "steps"),
    ("train_min", "train min (wall, mean)"),
]


def project_config(seeds: list[int]) -> dict[str, Any]:
    """``config/config.yaml`` with its first run and ``demo_auto``, both with ``seeds``."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    name, run = next(iter(config["runs"].items()))
    auto = {"corpora": list(run["corpora"]), "resources": dict(run.get("resources") or {})}
    config["runs"] = {name: {**run, "seeds": seeds}, AUTO_RUN: {**auto, "seeds": seeds}}
    return config


def _pct(value: str) -> str:
    return f"{100 * float(value):.2f} %" if value not in ("", None) else "n/a"


def _points(value: str) -> str:
    return f"{100 * float(value):.2f}" if value not in ("", None) else "n/a"


def _interval(low: str, high: str) -> str:
    if low in ("", None) or high in ("", None):
        return ""
    return f" [{100 * float(low):.2f}, {100 * float(high):.2f}]"


def training(work: Path, run: str, seeds: list[int]) -> dict[str, str]:
    """The steps and mean wall minutes of a run's replicas' train jobs (their summaries)."""
    summaries = [
        read_json(path)
        for seed in seeds
        if (
            path := work / "results/runs" / replica_name(run, seed) / "train/summary.json"
        ).is_file()
    ]
    walls = [s["wall_seconds"] for s in summaries if s.get("wall_seconds") is not None]
    steps = sorted({str(s.get("steps")) for s in summaries})
    return {
        "steps": ", ".join(steps) or "n/a",
        "train_min": f"{statistics.fmean(walls) / 60:.1f}" if walls else "n/a",
    }


def rows_of(replicas_csv: Path, recipes: dict[str, str]) -> list[dict[str, str]]:
    """The table's rows from a project's ``replicas.csv`` (``recipes``: run -> recipe)."""
    with open(replicas_csv, newline="", encoding="utf-8") as f:
        table = sorted(csv.DictReader(f), key=lambda r: r["run"] != r["baseline_run"])
    rows = []
    for r in table:
        diff = r.get("wer_diff_vs_baseline", "")
        rows.append(
            {
                "run": r["run"],
                "recipe": recipes.get(r["run"], "?"),
                "eval_set": r["eval_set"],
                "seeds": r["seeds"],
                "wer": _pct(r["wer_mean"]) + _interval(r["wer_mean_ci_low"], r["wer_mean_ci_high"]),
                "spread": f"{_points(r['wer_sd'])} ({_pct(r['wer_min'])}-{_pct(r['wer_max'])})",
                "diff": "-"
                if diff == "" or r["run"] == r["baseline_run"]
                else f"{100 * float(diff):+.2f}"
                + _interval(r["wer_diff_vs_baseline_ci_low"], r["wer_diff_vs_baseline_ci_high"]),
                "selected": r["selected"],
            }
        )
    return rows


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="seed replicas of each run")
    p.add_argument("--work", type=Path, default=REPO / "results/bench/recipe_compare/work")
    p.add_argument("--cores", type=int, default=2, help="snakemake --cores")
    p.add_argument("--collect", action="store_true", help="read a finished project, run nothing")
    p.add_argument("--out", type=Path, help="where the JSON goes (default: results/bench)")
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    work = args.work.resolve()
    before = load()
    config = project_config(args.seeds)
    base, base_run = next(iter(config["runs"].items()))
    rc, wall = 0, None
    if not args.collect:
        work.mkdir(parents=True, exist_ok=True)
        place_recipe(base_run["recipe"], work)
        write_text(work / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        rc, wall = run_snakemake(work, args.cores)
    if not (work / REPLICAS).is_file():
        print(f"no {REPLICAS} in {work}: the workflow did not finish", file=sys.stderr)
        return rc or 1
    recipes = {base: base_run["recipe"], AUTO_RUN: "auto"}
    rows = [
        {**row, **training(work, row["run"], args.seeds)}
        for row in rows_of(work / REPLICAS, recipes)
    ]
    notes = [
        f"Both runs: the demo corpus, {len(args.seeds)} seed replicas each, the config's "
        "decoding; each replica's artifact selected on dev. Intervals: utterances and seeds "
        "resampled; the difference pairs utterances across all replicas of both runs.",
    ]
    if wall is not None:
        notes.append(f"The whole workflow took {wall / 60:.0f} min on this machine.")
    data = figures_json(
        COLUMNS,
        rows,
        load_before=before,
        notes=notes,
        settings={**settings_of(args), "returncode": rc},
        title="The demo corpus: the shipped recipe against `recipe: auto`, with seed replicas",
    )
    write_figures("recipe_compare", data, args.out)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
