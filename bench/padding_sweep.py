"""Benchmark: how much of the forward's input is padding, by ``batching.num_buckets``.

Runs the recipe's train sampler (:func:`asrflow.train.preflight.audit.sampled_batches`, what the
batch audit and ``rule train`` draw) over the train cuts for ``--epochs`` epochs at each bucket
count, without reading audio, and prints per count: the duration bins Lhotse estimated, batches per
epoch, audio seconds per batch, ``padding_share`` (the padding of all batches together: the share
of the padded audio that the forward spends on padding, as the batch audit reports it), the
per-batch median padding ratio and the widest bucket. The time a step spends on padding grows
with ``padding_share`` (``bench/espnet_speed.py`` measures it as the bare loop on asrflow's
batches against ESPnet2's length-sorted ones).

What this cannot say: what the bucket count does to accuracy. More buckets mix less (each batch
holds cuts of one narrow duration range), so the batches change and with them the trained
weights; judge that on dev WER with seed replicas (``runs.<run>.seeds``, docs/training.md
"Seed replicas"), not on one run each. Deterministic: the same cuts, recipe and seed give the same
table on any machine::

    uv run python bench/padding_sweep.py [--buckets 10,20,30] [--epochs 3] [--set KEY=VALUE]

Needs the demo's filtered train cuts (see ``bench/espnet_speed.py``; ``--train`` and
``--recipe`` name others). The table is also written as ``results/bench/padding_sweep.json``
(``bench/figures.py``), the columns of ``docs/figures/padding_sweep.json`` (docs/performance.md):
copy a fresh run over it. ``docs/figures/buckets.json`` holds the WER of trained runs at two
bucket counts, which this script cannot measure.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

from asrflow import layout
from asrflow.recipe.load import load_recipe
from asrflow.recipe.mappings import dotted_overrides

REPO = Path(__file__).resolve().parents[1]
RECIPE = "config/recipes/demo_conformer.yaml"


def sweep_row(cuts: Any, span: tuple[float, float], batching: Any, epochs: int) -> dict[str, Any]:
    """One bucket count's figures (see the module docstring); ``span``: the shortest and the
    longest cut's duration (the outer edges of the buckets)."""
    from asrflow.train.preflight.audit import padding_share, sampled_batches

    no_tokens: dict[str, int] = collections.defaultdict(int)  # padding needs no transcript
    batches, per_epoch, bins = sampled_batches(cuts, batching, no_tokens, epochs)
    edges = [span[0], *bins, span[1]]
    widest = max(itertools.pairwise(edges), key=lambda e: e[1] - e[0])
    return {
        "buckets": batching.num_buckets,
        "bins": len(bins) + 1,
        "batches": statistics.fmean(per_epoch),
        "audio": statistics.fmean(b.audio_seconds for b in batches),
        "share": padding_share(batches),
        "median": statistics.median(b.padding_ratio for b in batches),
        "widest": widest,
    }


COLUMNS = (
    ("buckets", "buckets"),
    ("bins", "bins"),
    ("batches", "batches/epoch"),
    ("audio", "audio s/batch"),
    ("share", "padding_share"),
    ("median", "median batch padding"),
    ("widest", "widest bucket"),
)


def figures_row(r: dict[str, Any], recipe_buckets: int) -> dict[str, Any]:
    """A :func:`sweep_row` as a row of ``results/bench/padding_sweep.json`` (:data:`COLUMNS`).

    >>> row = {"buckets": 2, "bins": 2, "batches": 2.0, "audio": 6.0, "share": 1 / 7,
    ...        "median": 1 / 6, "widest": (1.0, 3.0)}
    >>> figures_row(row, 10)["share"], figures_row(row, 2)["widest"]
    ('14.3 %', "1.00-3.00 s (the recipe's)")
    """
    lo, hi = r["widest"]
    mark = " (the recipe's)" if r["buckets"] == recipe_buckets else ""
    return {
        "buckets": r["buckets"],
        "bins": r["bins"],
        "batches": round(r["batches"], 1),
        "audio": round(r["audio"], 2),
        "share": f"{100 * r['share']:.1f} %",
        "median": f"{100 * r['median']:.1f} %",
        "widest": f"{lo:.2f}-{hi:.2f} s{mark}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=str(REPO / RECIPE))
    parser.add_argument("--train", default=str(REPO / layout.filtered("demo", "train")))
    parser.add_argument("--buckets", default="10,15,20,30,40,60", help="comma-separated counts")
    parser.add_argument("--epochs", type=int, default=3, help="epochs sampled per count")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="one epoch (bench/run_all.sh)")
    args = parser.parse_args()
    from figures import figures_json, load, settings_of, write_figures  # bench/, beside this

    load_before = load()
    if not Path(args.train).is_file():
        sys.exit(
            f"padding_sweep: {args.train} is missing. Make the demo's filtered cuts first "
            f"(rule filter_split; or the whole demo: uv run snakemake):\n"
            f"    uv run snakemake {layout.filtered('demo', 'train')}\nor pass --train."
        )
    from asrflow.data.cuts import load_cuts

    recipe = load_recipe(args.recipe, dotted_overrides(args.set))
    cuts = load_cuts(args.train)
    durations = [float(c.duration) for c in cuts]
    span = (min(durations), max(durations))
    counts = [int(n) for n in args.buckets.split(",")]
    epochs = 1 if args.quick else args.epochs
    b = recipe.batching
    print(
        f"bench/padding_sweep.py: {Path(args.recipe).name}, {len(cuts)} train cuts "
        f"({sum(durations) / 3600:.2f} h), max_duration {b.max_duration:g} "
        f"s, seed {b.seed}, {epochs} epoch(s) sampled per bucket count; no audio read"
    )
    head = (
        f"{'buckets':>8}{'bins':>6}{'batches/epoch':>15}{'audio s/batch':>15}"
        f"{'padding_share':>15}{'median batch':>14}  widest bucket"
    )
    print(head)
    print("-" * (len(head) + 14))
    rows = []
    for n in counts:
        r = sweep_row(cuts, span, dataclasses.replace(b, num_buckets=n), epochs)
        rows.append(figures_row(r, b.num_buckets))
        lo, hi = r["widest"]
        mark = "  (the recipe's)" if n == b.num_buckets else ""
        print(
            f"{r['buckets']:>8}{r['bins']:>6}{r['batches']:>15.1f}{r['audio']:>15.2f}"
            f"{100 * r['share']:>14.1f}%{100 * r['median']:>13.1f}%  {lo:.2f}-{hi:.2f} s{mark}"
        )
    print(
        "padding_share: 1 - audio / padded audio over all batches (what the forward spends on "
        "padding); median batch: the median of the per-batch padding ratios; bins: what Lhotse "
        "estimated (fewer than asked on small or uniform data). Accuracy: see the docstring."
    )
    notes = [
        f"{Path(args.recipe).name}, {len(cuts)} train cuts ({sum(durations) / 3600:.2f} h), "
        f"max_duration {b.max_duration:g} s, seed {b.seed}, {epochs} epoch(s) sampled per "
        "bucket count; no audio read. padding_share: 1 - audio / padded audio over all batches; "
        "median batch padding: the median of the per-batch padding ratios; bins: what Lhotse "
        "estimated."
    ]
    settings = settings_of(args) | {"epochs": epochs}
    data = figures_json(COLUMNS, rows, load_before=load_before, notes=notes, settings=settings)
    write_figures("padding_sweep", data)


if __name__ == "__main__":
    main()
