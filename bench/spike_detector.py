"""Benchmark: does the loss-spike detector stay quiet on clean data and find planted errors?

Trains the demo run (``config/config.yaml``'s demo corpus, its tokenizer and the
``demo_conformer`` recipe) twice through :func:`asrflow.train.run.runner.train_run`, the function
``rule train`` calls: once on the clean train split and once on a copy in which ``--plant``
utterances carry another utterance's transcript (a donor of similar duration whose words barely
overlap; the donor keeps its own). Prints per run: steps, steps flagged as spikes (and %), wall
time, the top suspects, and each planted utterance's rank among all suspects (the summary lists
20; the full ranking comes from the detector state in ``last.ckpt``), and a census: every train
utterance's loss per token under the final weights, where the planted ones stand::

    uv run python bench/spike_detector.py [--workdir /tmp/asrflow-spike-bench] [--steps 2400]

The data half (synthesis, import, validation, filter, tokenizer) runs with Snakemake in the
work directory first (~1 minute); runs resume from their work directories when rerun. ``--steps``
below the recipe's ``trainer.max_steps`` trains a shorter run (its own cosine schedule). The two
full runs took 85 minutes on a shared 2-core machine (docs/training.md, "Loss spikes").

Each run is also a row of ``results/bench/spike_detector.json`` (``bench/figures.py``), in the
columns of ``docs/figures/spike_detector.json``, the table in docs/training.md ("Loss spikes"):
a fresh run of both can be copied over it (``cp results/bench/spike_detector.json
docs/figures/``, then ``uv run python bench/render_tables.py``).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
CORPUS, TOKENIZER, RECIPE = "demo", "demo_unigram", "demo_conformer"


def prepare_data(workdir: Path) -> dict[str, Path]:
    """The demo corpus's filtered train/dev cuts and tokenizer, made by the workflow."""
    from asrflow import layout

    if not (workdir / "config").is_dir():
        shutil.copytree(REPO / "config", workdir / "config")
    targets = {
        "train": layout.filtered(CORPUS, "train"),
        "dev": layout.filtered(CORPUS, "dev"),
        "bpe_model": layout.tokenizer_file(TOKENIZER, "bpe.model"),
        "tokens": layout.tokenizer_file(TOKENIZER, "tokens.txt"),
    }
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    subprocess.run(
        [*command, "--cores", "2", *targets.values()],
        cwd=workdir,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    return {k: workdir / v for k, v in targets.items()}


def plant_wrong_transcripts(train: Path, out: Path, count: int, seed: int) -> list[dict[str, Any]]:
    """Write ``train`` to ``out`` with ``count`` transcripts replaced by other utterances'."""
    from lhotse.utils import fastcopy

    from asrflow.data.cuts import load_cuts, save_cuts, supervision, text

    cuts = list(load_cuts(train))
    rng = random.Random(seed)
    by_id = {c.id: c for c in cuts}
    candidates = [c for c in cuts if len(text(c).split()) >= 4]
    planted: list[dict[str, Any]] = []
    used: set[str] = set()
    for cut in rng.sample(candidates, len(candidates)):
        if len(planted) == count:
            break
        if cut.id in used:
            continue
        words = set(text(cut).split())
        donors = [
            d
            for d in candidates
            if d.id != cut.id
            and d.id not in used
            and abs(d.duration - cut.duration) <= 0.15 * cut.duration
            and len(words & set(text(d).split())) <= 0.25 * len(words)
        ]
        if not donors:
            continue
        donor = rng.choice(donors)
        used.update({cut.id, donor.id})
        planted.append({"id": cut.id, "true": text(cut), "given": text(donor), "donor": donor.id})
        sup = fastcopy(supervision(cut), text=text(donor))
        by_id[cut.id] = fastcopy(cut, supervisions=[sup])
    save_cuts([by_id[c.id] for c in cuts], out)
    return planted


def train(name: str, workdir: Path, data: dict[str, Path], train_cuts: Path, steps: int | None):
    from asrflow.recipe.load import load_recipe
    from asrflow.train.run.runner import train_run
    from asrflow.train.spec import RunSpec

    config = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    spec = RunSpec(
        name=name,
        recipe=load_recipe(
            REPO / f"config/recipes/{RECIPE}.yaml",
            {"trainer": {"max_steps": steps}} if steps else {},
        ),
        recipe_name=RECIPE,
        train_cuts=[str(train_cuts)],
        dev_cuts=str(data["dev"]),
        bpe_model=str(data["bpe_model"]),
        tokens=str(data["tokens"]),
        normalization=config["text_normalization"],
    )
    run = workdir / "runs" / name
    started = time.time()
    summary = train_run(
        spec, run / "work", run / "out", run / "summary.json", threads=2, enable_progress_bar=False
    )
    return summary, time.time() - started, run / "work"


def full_ranking(work: Path) -> list[dict[str, Any]]:
    """Every suspect of a run, from the detector state its ``last.ckpt`` holds."""
    from asrflow.train.loop.diagnostics import Diagnostics

    ckpt = torch.load(work / "checkpoints/last.ckpt", weights_only=True, map_location="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        diag = Diagnostics(tmp, [], write_spikes=False)
        diag.load_state_dict(ckpt["asrflow_diagnostics"], int(ckpt["global_step"]))
    return diag.suspects(limit=10**9)


def loss_census(
    work: Path, data: dict[str, Path], train_cuts: Path, planted: list[dict[str, Any]]
) -> str:
    """Every train utterance's loss per token under the run's final weights (eval mode, as
    trained: the planted transcripts for the planted run): where the planted ones stand."""
    from asrflow.data.cuts import load_cuts
    from asrflow.recipe.load import load_recipe
    from asrflow.text import TextNormalization
    from asrflow.tokens import TokenEncoder
    from asrflow.train.batches.loader import AsrDataset
    from asrflow.train.loop.diagnostics import robust_center
    from asrflow.train.loop.model import build_model
    from asrflow.train.loop.module import UtteranceLossTap

    config = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    recipe = load_recipe(REPO / f"config/recipes/{RECIPE}.yaml")
    model, _ = build_model(recipe.model, data["tokens"], data["bpe_model"])
    ckpt = torch.load(work / "checkpoints/last.ckpt", weights_only=True, map_location="cpu")
    model.load_state_dict({k[len("model.") :]: v for k, v in ckpt["state_dict"].items()})
    model.eval()
    tap = UtteranceLossTap(model)
    norm = TextNormalization.from_dict(config["text_normalization"])
    dataset = AsrDataset(TokenEncoder(data["bpe_model"], data["tokens"], norm))
    cuts = sorted(load_cuts(train_cuts), key=lambda c: c.duration)
    losses: dict[str, float] = {}
    with torch.no_grad():
        for i in range(0, len(cuts), 16):
            batch = dataset[cuts[i : i + 16]]
            model(batch["speech"], batch["speech_lengths"], batch["text"], batch["text_lengths"])
            per_token = tap.per_token(batch["text_lengths"], len(batch["ids"])) or []
            losses.update(zip(batch["ids"], per_token, strict=True))
    center, spread = robust_center([math.log(max(v, 1e-6)) for v in losses.values()])
    median = math.exp(center)
    order = sorted(losses, key=losses.__getitem__, reverse=True)
    lines = [
        f"final weights, eval mode: median utterance {median:.3f} per token, robust sd of the "
        f"log {spread:.2f}; worst: " + ", ".join(f"{u} {losses[u]:.2f}" for u in order[:3])
    ]
    for p in planted:
        v = losses[p["id"]]
        lines.append(
            f"  planted {p['id']}: {v:.2f} per token = {v / median:.1f}x the median, "
            f"z {(math.log(v) - center) / spread:.1f}, rank {order.index(p['id']) + 1} of "
            f"{len(order)} by loss"
        )
    return "\n".join(lines)


def report(
    name: str,
    summary: dict[str, Any],
    seconds: float,
    ranking: list[dict[str, Any]],
    planted: list[dict[str, Any]],
) -> None:
    steps, spikes = summary["steps"], summary["loss_spikes"]
    metrics = {k: v for k, v in summary["final_metrics"].items() if k.startswith("valid/")}
    print(
        f"\n== {name}: {summary['status']}, {steps} steps in {seconds / 60:.1f} min, "
        f"final {', '.join(f'{k} {v:.4g}' for k, v in sorted(metrics.items()))}"
    )
    print(
        f"steps flagged: {spikes} of {steps} ({100 * spikes / max(steps, 1):.2f} %); "
        f"{len(ranking)} utterance(s) blamed at least once"
    )
    print("top suspects (id, spikes/appearances, score, max factor):")
    for s in ranking[:8]:
        print(f"  {s['id']}  {s['spikes']}/{s['appearances']}  {s['score']}  {s['max_factor']}x")
    ranks = {s["id"]: k + 1 for k, s in enumerate(ranking)}
    for p in planted:
        rank = ranks.get(p["id"])
        where = f"rank {rank} of {len(ranking)}" if rank else "never blamed"
        row = next((s for s in ranking if s["id"] == p["id"]), None)
        detail = f" ({row['spikes']}/{row['appearances']}, score {row['score']})" if row else ""
        print(f"  planted {p['id']}: {where}{detail}")


COLUMNS = (
    ("train", "train set, steps"),
    ("flagged", "steps flagged"),
    ("planted", "planted utterances' rank among suspects (blamed/appearances, score)"),
    ("dev_wer", "dev WER"),
    ("commit", "commit"),
    ("minutes", "minutes"),
)


def figures_row(
    name: str,
    summary: dict[str, Any],
    seconds: float,
    ranking: list[dict[str, Any]],
    planted: list[dict[str, Any]],
) -> dict[str, Any]:
    """One run as a row of ``results/bench/spike_detector.json`` (:data:`COLUMNS`; the commit
    is the file's, filled in by :func:`write_json`): what :func:`report` prints of it."""
    steps, spikes = summary["steps"], summary["loss_spikes"]
    flagged = f"{spikes} of {steps} ({100 * spikes / max(steps, 1):.2f} %)"
    ranks = {s["id"]: (k + 1, s) for k, s in enumerate(ranking)}
    found = [ranks[p["id"]] for p in planted if p["id"] in ranks] if name == "planted" else []
    if name == "planted":
        blamed = sum(s["spikes"] for _, s in found)
        flagged += f"; planted utterances blamed {blamed} time(s)"
        where = ", ".join(f"{k} ({s['spikes']}/{s['appearances']}, {s['score']})" for k, s in found)
        missed = len(planted) - len(found)
        where += (", " if where and missed else "") + (f"{missed} never blamed" if missed else "")
    else:
        flagged += f": {len(ranking)} utterance(s) blamed"
        where = None
    wer = summary["final_metrics"].get("valid/wer")
    return {
        "train": f"{name if name == 'clean' else f'{len(planted)} planted'}, {steps}",
        "flagged": flagged,
        "planted": where,
        "dev_wer": None if wer is None else f"{100 * wer:.2f} %",
        "minutes": f"{seconds / 60:.0f}",
    }


def write_json(rows: list[dict[str, Any]], load_before: str, args: argparse.Namespace) -> None:
    """``results/bench/spike_detector.json``: a row per run."""
    from figures import figures_json, settings_of, stamp_rows, write_figures  # bench/

    data = figures_json(COLUMNS, rows, load_before=load_before, settings=settings_of(args))
    stamp_rows(data, ["commit"])
    write_figures("spike_detector", data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/asrflow-spike-bench"))
    parser.add_argument("--steps", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--plant", type=int, default=3, help="wrong transcripts planted")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["clean", "planted"], default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    args.workdir.mkdir(parents=True, exist_ok=True)
    from figures import load  # bench/, beside this script

    load_before, rows = load(), []
    started = time.time()
    data = prepare_data(args.workdir.resolve())
    planted_cuts = args.workdir / "planted_train.jsonl.gz"
    planted = plant_wrong_transcripts(data["train"], planted_cuts, args.plant, args.seed)
    print(f"data ready in {time.time() - started:.0f} s; planted:")
    for p in planted:
        print(f"  {p['id']}: {p['true']!r} -> {p['given']!r} (from {p['donor']})")
    runs = [("clean", data["train"]), ("planted", planted_cuts)]
    for name, cuts in runs:
        if args.only and name != args.only:
            continue
        summary, seconds, work = train(name, args.workdir, data, cuts, args.steps)
        ranking = full_ranking(work)
        report(name, summary, seconds, ranking, planted)
        print(loss_census(work, data, cuts, planted))
        rows.append(figures_row(name, summary, seconds, ranking, planted))
    print(f"\ntotal {(time.time() - started) / 60:.1f} min")
    write_json(rows, load_before, args)


if __name__ == "__main__":
    main()
