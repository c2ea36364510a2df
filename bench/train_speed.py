"""Benchmark: optimizer steps per second of a recipe under several precisions, in one process.

Trains the run's model for ``--steps`` optimizer steps per precision on the run's own data (the
same model, module, sampler and loader as ``rule train``, :func:`asrflow.train.loop.parts.
build_trainer_parts`), without validation or checkpoints, and prints per precision: median and
mean seconds per step after ``--warmup`` steps, audio seconds trained per wall second, peak GPU
memory, and the speed ratio against the first precision listed. Compare ratios measured in one
run: these machines are shared and noisy::

    uv run python bench/train_speed.py config/recipes/demo_conformer.yaml \\
        --train results/data/demo/filtered/train.jsonl.gz \\
        --dev results/data/demo/filtered/dev.jsonl.gz \\
        --tokenizer results/tokenizers/demo_unigram \\
        --precisions 32-true bf16-mixed bf16-true --steps 200 [--set batching.max_duration=60]

``--set KEY=VALUE`` overrides a recipe key as a run's ``overrides`` would (VALUE is YAML). On a CPU
without avx512_bf16/AMX, bf16 is ~10x slower than fp32 (``precision: auto`` picks fp32 there).

The figures are also written as ``results/bench/train_speed.json`` (``bench/figures.py``), one
row in the columns of ``docs/figures/gpu_train_speed.json``, the GPU table in docs/training.md
(a precision with no column there gets a column of its own): add its row to that file's rows
(the file holds a row per recipe), then ``uv run python bench/render_tables.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from asrflow.recipe.load import load_recipe, with_overrides
from asrflow.recipe.mappings import deep_merge, dotted_overrides
from asrflow.train.loop.parts import build_trainer_parts
from asrflow.train.spec import RunSpec

NORMALIZATION = {"lowercase": True, "strip_punctuation": True, "keep": "'"}


class StepTimer:
    """Wall time of each optimizer step (CUDA synchronised), and audio seconds per batch."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.audio: list[float] = []
        self._start = 0.0

    def _sync(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def callback(self) -> Any:
        from lightning.pytorch.callbacks import Callback

        timer = self

        class _Callback(Callback):
            def on_train_batch_start(self, trainer, module, batch, batch_idx):
                timer._sync()
                timer._start = time.perf_counter()

            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                timer._sync()
                timer.seconds.append(time.perf_counter() - timer._start)
                timer.audio.append(float(batch["audio_seconds"]))

        return _Callback()


def measure(spec: RunSpec, overrides: dict[str, Any], precision: str, steps: int) -> StepTimer:
    import lightning as L

    recipe = with_overrides(
        spec.recipe, deep_merge(overrides, {"trainer": {"precision": precision}})
    )
    timer = StepTimer()
    with tempfile.TemporaryDirectory(prefix="asrflow-bench-") as work:
        parts = build_trainer_parts(dataclasses.replace(spec, recipe=recipe), Path(work))
        trainer = L.Trainer(
            default_root_dir=work,
            max_steps=steps,
            max_epochs=-1,
            precision=precision,
            accelerator="auto",
            devices=1,
            gradient_clip_val=recipe.trainer.gradient_clip_val,
            accumulate_grad_batches=1,
            callbacks=[timer.callback()],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            limit_val_batches=0,
            use_distributed_sampler=False,
            num_sanity_val_steps=0,
        )
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        trainer.fit(parts["module"], parts["train_loader"])
    return timer


PRECISION_KEYS = {"32-true": "tf32", "bf16-mixed": "bf16_mixed", "bf16-true": "bf16_true"}
"""The columns of ``docs/figures/gpu_train_speed.json`` by precision."""


def figures_table(
    recipe: str, max_duration: float, rows: list[tuple[str, float, float, float, float]], gpu: bool
) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The columns and the one row of ``results/bench/train_speed.json`` from ``main``'s
    ``rows`` (precision, median and mean s/step, audio s/s, peak GiB): a cell per precision.

    >>> columns, row = figures_table("x/demo.yaml", 20, [("bf16-true", 0.158, 0.2, 9, 4.5)], True)
    >>> [key for key, _ in columns]
    ['recipe', 'tf32', 'bf16_mixed', 'bf16_true']
    >>> row
    {'recipe': '`demo`, 20 s', 'bf16_true': '0.158 s/step, 4.5 GiB'}
    """
    columns = [
        ("recipe", "recipe, batch"),
        ("tf32", "`32-true` (TF32)" if gpu else "`32-true`"),
        ("bf16_mixed", "`bf16-mixed`"),
        ("bf16_true", "`bf16-true`"),
    ]
    row: dict[str, Any] = {"recipe": f"`{Path(recipe).stem}`, {max_duration:g} s"}
    for precision, median, _mean, _rate, peak in rows:
        key = PRECISION_KEYS.get(precision, precision.replace("-", "_"))
        if key not in dict(columns):
            columns.append((key, f"`{precision}`"))
        row[key] = f"{median:.3f} s/step" + (f", {peak:.1f} GiB" if peak else "")
    return columns, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--train", required=True, help="train cuts (JSONL.gz)")
    parser.add_argument("--dev", required=True, help="dev cuts (JSONL.gz)")
    parser.add_argument("--tokenizer", required=True, help="dir with bpe.model and tokens.txt")
    parser.add_argument("--precisions", nargs="+", default=["32-true", "bf16-mixed"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="steps left out of the figures")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must be larger than --warmup")
    torch.set_num_threads(args.threads)
    from figures import figures_json, load, settings_of, write_figures  # bench/, beside this

    load_before = load()
    overrides = dotted_overrides(args.set)
    tok = Path(args.tokenizer)
    spec = RunSpec(
        name="bench",
        recipe=load_recipe(args.recipe),
        recipe_name=args.recipe,
        train_cuts=[args.train],
        dev_cuts=args.dev,
        bpe_model=str(tok / "bpe.model"),
        tokens=str(tok / "tokens.txt"),
        normalization=NORMALIZATION,
        max_dev_cuts=1,
    )
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    print(f"{args.recipe} on {device}, torch {torch.__version__}, overrides {overrides or '-'}")
    print(f"{args.steps} steps per precision, first {args.warmup} left out")
    rows = []
    for precision in args.precisions:
        timer = measure(spec, overrides, precision, args.steps)
        s = timer.seconds[args.warmup :]
        audio = sum(timer.audio[args.warmup :])
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
        rows.append((precision, statistics.median(s), statistics.fmean(s), audio / sum(s), peak))
    base = rows[0][1]
    header = f"{'precision':<12}{'median s/step':>14}{'mean s/step':>13}"
    print(header + f"{'audio s/s':>11}{'peak GiB':>10}{'speed vs ' + rows[0][0]:>22}")
    for precision, median, mean, rate, peak in rows:
        print(
            f"{precision:<12}{median:>14.4f}{mean:>13.4f}{rate:>11.0f}{peak:>10.2f}"
            f"{base / median:>21.2f}x"
        )
    max_duration = load_recipe(args.recipe, overrides).batching.max_duration
    columns, row = figures_table(args.recipe, max_duration, rows, torch.cuda.is_available())
    notes = [
        f"{device}, torch {torch.__version__}; median s/step over {args.steps} steps after "
        f"{args.warmup}; overrides {overrides or '-'}. "
        + "; ".join(
            f"{precision}: mean {mean:.4f} s/step, {rate:.0f} audio s/s, "
            f"{base / median:.2f}x the speed of {rows[0][0]}"
            for precision, median, mean, rate, _ in rows
        )
    ]
    settings = settings_of(args)
    data = figures_json(columns, [row], load_before=load_before, notes=notes, settings=settings)
    write_figures("train_speed", data)


if __name__ == "__main__":
    main()
