"""Benchmark: what a DataLoader worker costs the training step, by how the worker starts.

The same bare training loop (forward, per-token loss, backward, grad clip, AdamW; the demo
recipe's model, 2 torch threads, fp32 on the CPU) on the same batches of asrflow's train
sampler, fed seven ways, in interleaved rounds:

- ``preloaded``: the batches loaded beforehand (no loading, no other process);
- ``in-process``: asrflow's loader with ``num_workers: 0`` (the audio read in the trainer);
- ``worker, fork server``: asrflow's loader with one worker, as ``rule train`` builds it
  (:func:`asrflow.train.batches.workers.worker_loader`: the worker is forked from a fork server,
  runs at ``batching.worker_nice`` 19 and hands small tensors over as bytes);
- ``..., nice 0``: the same worker at the trainer's CPU priority (asrflow's before);
- ``..., tensors shared``: at nice 19, every tensor handed over through shared memory
  (PyTorch's way, asrflow's before: one file-descriptor hand-over per tensor);
- ``worker, fork``: the same dataset and sampler with one worker forked from the trainer
  (PyTorch's default on Linux, and asrflow's before the fork server);
- ``idle forked child``: the preloaded batches while a forked child of the trainer sleeps.

Each row gives the median and total seconds per step over the timed steps of all rounds, the
median forward, and the total against ``preloaded``. Compare ratios measured in one run::

    uv run python bench/worker_start.py [--quick] [--steps 60 --rounds 3]

Needs the demo's filtered cuts and tokenizer (see ``bench/espnet_speed.py``; the same
``--train``/``--dev``/``--tokenizer`` options).

The figures are also written as ``results/bench/worker_start.json`` (``bench/figures.py``): one
row in the columns of ``docs/figures/performance_training.json``, the training table of
docs/performance.md, where it is added to the rows of the other runs (that table keeps every
run's rows, each with its machine, date, commit and load).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from espnet_speed import (
    CORPUS,
    PERFORMANCE_COLUMNS,
    RECIPE,
    REPO,
    TOKENIZER,
    load,
    machine,
    text_normalization,
    versions,
)

from asrflow import layout
from asrflow.recipe.load import load_recipe, scaled_lr
from asrflow.train.spec import RunSpec


def run_spec(args: argparse.Namespace, workers: int) -> tuple[RunSpec, Any]:
    overrides = {"batching": {"num_workers": workers}}
    tok = Path(args.tokenizer)
    spec = RunSpec(
        name="worker_start",
        recipe=load_recipe(REPO / RECIPE, overrides),
        recipe_name=RECIPE,
        train_cuts=[args.train],
        dev_cuts=args.dev,
        bpe_model=str(tok / "bpe.model"),
        tokens=str(tok / "tokens.txt"),
        normalization=text_normalization(),
        max_dev_cuts=4,
    )
    return spec, spec.recipe


def train_loader(
    args: argparse.Namespace, workers: int, work: Path, nice: int | None = None, shared=False
) -> Any:
    """The train loader ``rule train`` builds, its sampler at epoch 0; ``nice``: its workers'
    ``batching.worker_nice`` instead of the recipe's; ``shared``: every tensor through shared
    memory (PyTorch's own collation of ``batch_size=None``)."""
    from torch.utils.data._utils.collate import default_convert

    from asrflow.train.loop.parts import build_trainer_parts

    spec, _ = run_spec(args, workers)
    loader = build_trainer_parts(spec, work)["train_loader"]
    loader.sampler.set_epoch(0)
    if nice is not None:
        loader.worker_nice = nice
    if shared:
        loader.collate_fn = default_convert
    return loader


def forked_loader(loader: Any) -> Any:
    """``loader``'s dataset and sampler with one worker forked from this process."""
    from torch.utils.data import DataLoader

    return DataLoader(
        loader.dataset,
        batch_size=None,
        sampler=loader.sampler,
        num_workers=1,
        persistent_workers=True,
        multiprocessing_context="fork",
    )


def bare_loop(
    spec: RunSpec, recipe: Any, batches: Iterable[dict[str, Any]], n: int, warmup: int
) -> dict[str, list[float]]:
    """``n`` steps of forward, backward, clip and AdamW of the recipe's model on ``batches``;
    seconds per step and per forward of the steps after ``warmup``."""
    import lightning as L

    from asrflow.train.loop.loss import per_token
    from asrflow.train.loop.model import build_model
    from asrflow.train.loop.schedule import build_optimizer

    L.seed_everything(recipe.trainer.seed, verbose=False)
    model, _ = build_model(recipe.model, spec.tokens, spec.bpe_model)
    optimizer = build_optimizer(model.parameters(), recipe.optim, scaled_lr(recipe))
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    steps, forwards = [], []
    it = iter(batches)
    start = time.perf_counter()
    for _ in range(n):
        b = next(it)
        t0 = time.perf_counter()
        loss_utt, _, _ = model(
            b["speech"], b["speech_lengths"], b["text"].clone(), b["text_lengths"]
        )
        forwards.append(time.perf_counter() - t0)
        per_token(loss_utt, len(b["speech_lengths"]), int(b["text_lengths"].sum())).backward()
        torch.nn.utils.clip_grad_norm_(params, recipe.trainer.gradient_clip_val or 1e9)
        optimizer.step()
        optimizer.zero_grad()
        now = time.perf_counter()
        steps.append(now - start)
        start = now
    return {"seconds": steps[warmup:], "forward": forwards[warmup:]}


def run_loops(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every loop, ``args.rounds`` interleaved rounds: per loop name, each round's timings."""
    spec, recipe = run_spec(args, 0)
    n = args.warmup + args.steps
    preloaded = [b for _, b in zip(range(n), train_loader(args, 0, work / "pre"), strict=False)]

    def bare(batches: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
        return bare_loop(spec, recipe, batches, n, args.warmup)

    loops: dict[str, Callable[[], dict[str, list[float]]]] = {
        "preloaded": lambda: bare(preloaded),
        "in-process (num_workers 0)": lambda: bare(train_loader(args, 0, work / "w0")),
        "worker, fork server (asrflow)": lambda: bare(train_loader(args, 1, work / "w1")),
        "..., nice 0": lambda: bare(train_loader(args, 1, work / "n0", nice=0)),
        "..., tensors shared": lambda: bare(train_loader(args, 1, work / "sh", shared=True)),
        "worker, fork": lambda: bare(forked_loader(train_loader(args, 1, work / "wf"))),
    }

    def with_idle_child() -> dict[str, list[float]]:
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(3600,))
        child.start()
        try:
            return bare(preloaded)
        finally:
            child.terminate()
            child.join()

    loops["idle forked child, preloaded"] = with_idle_child
    timed: dict[str, list[dict[str, list[float]]]] = {name: [] for name in loops}
    for _ in range(args.rounds):
        for name, loop in loops.items():
            timed[name].append(loop())
            gc.collect()
    return timed


ASRFLOW_LOOPS = ("in-process (num_workers 0)", "worker, fork server (asrflow)")
"""The loops that are asrflow's (the ``asrflow`` cell); the others are what it is set against."""


def figures_row(timed: dict[str, list[dict[str, list[float]]]], setup: str) -> dict[str, Any]:
    """The row of ``results/bench/worker_start.json`` (``PERFORMANCE_COLUMNS``; ``main`` adds
    machine, date, commit and load): each loop's total over the timed steps against
    ``preloaded``'s, and its median forward. ``setup``: the rounds and steps, for ``what``."""
    base = sum(sum(r["seconds"]) for r in timed["preloaded"])

    def cell(names: list[str]) -> str:
        parts = []
        for name in names:
            runs = timed[name]
            total = sum(s for r in runs for s in r["seconds"])
            forward = statistics.median(s for r in runs for s in r["forward"])
            parts.append(f"{name}: {total / base:.3f}x / {forward:.4f} s")
        return "; ".join(parts)

    return {
        "what": (
            f"what a loader worker costs a step (`worker_start.py`, {setup}; total over the "
            "timed steps against preloaded / median forward)"
        ),
        "asrflow": cell([n for n in timed if n in ASRFLOW_LOOPS]),
        "against": cell([n for n in timed if n not in ASRFLOW_LOOPS]),
        "ratio": "-",
        "goal": "-",
    }


def main() -> None:
    results = REPO / layout.RESULTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", default=str(REPO / layout.filtered(CORPUS, "train")))
    parser.add_argument("--dev", default=str(REPO / layout.filtered(CORPUS, "dev")))
    parser.add_argument("--tokenizer", default=str(results / "tokenizers" / TOKENIZER))
    parser.add_argument("--steps", type=int, default=100, help="timed steps per loop and round")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="40 steps after 10, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds = 40, 10, 2
    for p in (args.train, args.dev, Path(args.tokenizer) / "bpe.model"):
        if not Path(p).is_file():
            raise SystemExit(f"worker_start: {p} is missing; see bench/espnet_speed.py --help")
    torch.set_num_threads(args.threads)
    started, load_before = datetime.datetime.now().astimezone(), load()
    with tempfile.TemporaryDirectory(prefix="worker_start.") as tmp:
        timed = run_loops(args, Path(tmp))
    print(f"bench/worker_start.py, {started.isoformat(timespec='seconds')}")
    print(f"machine: {machine()}; {versions()}; {args.threads} torch threads, fp32")
    print(f"load average (1, 5, 15 min): {load_before} before, {load()} after")
    print(
        f"{args.rounds} round(s) interleaved, {args.steps} timed steps after {args.warmup} per "
        "loop and round; the demo recipe's model and asrflow's batches (max_duration 20 s)"
    )
    print()
    print(f"{'loop':32s} {'s/step':>8s} {'total s':>8s} {'forward':>8s}  vs preloaded  rounds")
    base = sum(sum(r["seconds"]) for r in timed["preloaded"])
    for name, runs in timed.items():
        seconds = [s for r in runs for s in r["seconds"]]
        forward = [s for r in runs for s in r["forward"]]
        total = sum(seconds)
        rounds = " ".join(f"{sum(r['seconds']):.2f}" for r in runs)
        print(
            f"{name:32s} {statistics.median(seconds):8.4f} {total:8.2f} "
            f"{statistics.median(forward):8.4f}  {total / base:10.3f}x  {rounds}"
        )
    from figures import figures_json, settings_of, stamp_rows, write_figures  # bench/

    setup = f"{args.rounds} rounds of {args.steps} steps after {args.warmup}"
    data = figures_json(
        PERFORMANCE_COLUMNS, [figures_row(timed, setup)], load_before=load_before,
        notes=[f"{versions()}; {args.threads} torch threads, fp32."],
        settings=settings_of(args),
    )  # fmt: skip
    stamp_rows(data)
    for row in data["rows"]:
        row["load"] = load_before.split()[0]  # the docs table's load: the 1-min one, before
    write_figures("worker_start", data)


if __name__ == "__main__":
    main()
