"""Benchmark: asrflow's training loop against ESPnet2's own trainer and a bare loop, in one process.

Trains the same ESPnet2 model (the recipe's ESPnet keys, built by ``ASRTask.build_model`` as
asrflow builds it: :func:`asrflow.train.loop.model.build_model`) on the same train cuts, in the same
process with the same torch threads, with these loops, each for ``--warmup`` + ``--steps``
optimizer steps:

- ``ESPnet2 trainer``: ``ASRTask.main`` (what ``python -m espnet2.bin.asr_train`` runs) on the
  cuts written as an ESPnet2 data directory (``wav.scp``, ``text``, and the ``speech_shape`` and
  ``text_shape.bpe`` files of ``asr.sh``), ``--batch_type numel`` (or ``folded``) with the batch
  size chosen so that its batches hold as many audio seconds on average as asrflow's; the same
  optimizer (AdamW), grad clip and DataLoader workers as the recipe;
- ``asrflow``: the Lightning Trainer that ``rule train`` builds (:func:`asrflow.train.loop.parts.
  build_trainer_parts` and :func:`asrflow.train.run.runner._trainer`: Lhotse loader, CSV and
  TensorBoard loggers, callbacks, diagnostics), validating once, after the timed steps;
- ``bare loop``: forward, backward, grad clip, AdamW step (and the LR scheduler's) in a plain
  ``for`` loop on the same model, on batches loaded beforehand: asrflow's (the very batches its
  run trains on, in the same order) and ESPnet2's, so that padding (Lhotse's duration buckets vs
  ESPnet's length-sorted batches) and loop overhead can be told apart.

Every step is timed from the start of one training forward to the start of the next (a forward
pre-hook on the model), so the wait for the next batch and whatever a loop does between batches
count, in wall time and in the process's CPU time (``time.process_time``: every thread of the
process; all three loops run in it, and the loader workers, where the recipe has any, are not
counted). CPU time per audio second is the ratio the goal is judged on: on a shared machine a busy
neighbour moves wall time far more than the CPU a step takes (threads that spin while they wait for
a core still count, so compare loops of one run). Rounds run interleaved (ESPnet2, asrflow, bare,
bare, ESPnet2, ...) so that drift on a shared machine hits every loop alike (each round's median is
printed: drift shows there). The table gives per loop the median and mean seconds per step over the
timed steps of all rounds (the demo corpus has 15-30 s utterances that make one-cut batches 2-3x
slower than the rest, so the mean is well above the median), audio seconds and utterances per step,
padding, audio seconds per wall second, and time per audio second against ESPnet2's. Then the ratios
the issue sets goals for: asrflow <= 1.0x ESPnet2's time per audio second, and asrflow <= 1.05x the
bare loop on the same batches (all timed steps; the median of the per-step ratios beside it); and
the bare loop on the two batchings, which shows what padding costs. Each ratio is the median over
the rounds of each round's ratio, printed with the rounds' range and in how many rounds its goal
holds: the loops of one round run minutes apart, so the range shows the drift a ratio carries (more,
shorter rounds, e.g. ``--rounds 8 --steps 75``, tell a loop's cost from drift better).

``--breakdown`` adds two asrflow loops on its preloaded batches (with everything; with no
callbacks, loggers, the step's metrics row, diagnostics or ``self.log``), giving the cost of the
loader, of those extras and of Lightning's loop itself as medians of per-batch differences, and
after the rounds one asrflow run under Lightning's ``SimpleProfiler`` (plus the model's forward,
the loggers, ``self.log`` and the diagnostics): milliseconds per step of each part. ``timings.json``
in the work directory keeps every step of every loop (``--workdir`` keeps it).

Model FLOPs per audio second (forward + backward, ``torch.utils.flop_counter``) are printed
with each loop's model FLOPs utilisation against ``--peak-tflops`` (on a GPU by default its
dense bf16 peak) and, on a GPU, each loop's peak memory. ``--device cuda`` runs every loop on
one GPU: ESPnet2 with ``--ngpu 1 --use_amp true`` (bf16 autocast where the GPU has bf16),
asrflow as the recipe says (``precision: auto``: bf16-mixed), the bare loop under bf16
autocast; for the issue's GPU comparison use the a100 recipe (``bench/gpu_check.sh`` does)::

    uv run python bench/espnet_speed.py --device cuda --recipe config/recipes/a100_conformer.yaml \
        --set trainer.devices=1 --set batching.max_duration=250 --set batching.num_workers=6

Needs the demo's filtered cuts and tokenizer (``uv run snakemake`` makes them, or only the data
half: the command the error message prints). Recipe overrides with
``--set KEY=VALUE`` (e.g. ``--set batching.num_buckets=30``)::

    uv run python bench/espnet_speed.py --quick            # ~2 minutes: 40 steps after 10, 2 rounds
    uv run python bench/espnet_speed.py                    # ~9 minutes: 150 after 20, 4 rounds
    uv run python bench/espnet_speed.py --breakdown [--threads 2] [--workdir /tmp/espnet-speed]

Compare ratios measured in one run: these machines are shared and noisy.

The figures are also written as ``results/bench/espnet_speed.json`` (``bench/figures.py``): two
rows (the step against ESPnet2's trainer, the loop's own overhead) in the columns of
``docs/figures/performance_training.json``, the training table of docs/performance.md, where
they are added to the rows of the other runs (that table keeps every run's rows, each with its
machine, date, commit and load).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from asrflow import layout
from asrflow.recipe.load import load_recipe, scaled_lr
from asrflow.recipe.mappings import dotted_overrides
from asrflow.recipe.sections import Recipe
from asrflow.train.spec import RunSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import commit, machine  # the benchmarks' one description of machine and commit

REPO = Path(__file__).resolve().parents[1]
CORPUS, TOKENIZER, RECIPE = "demo", "demo_unigram", "config/recipes/demo_conformer.yaml"
FOLD_LENGTHS = (80000, 150)
"""``asr.sh``'s ``--fold_length`` for raw audio (samples) and BPE text (tokens)."""

log = logging.getLogger("espnet_speed")


# --- what the benchmark trains on ---------------------------------------------------------------


def check_inputs(paths: dict[str, Path]) -> None:
    """Exit with the command that makes the first missing input."""
    missing = [p for p in paths.values() if not p.is_file()]
    if not missing:
        return
    targets = " ".join(
        [
            layout.filtered(CORPUS, "train"),
            layout.filtered(CORPUS, "dev"),
            layout.tokenizer_file(TOKENIZER, "bpe.model"),
        ]
    )
    sys.exit(
        f"espnet_speed: {missing[0]} is missing. Make the demo's filtered cuts and tokenizer "
        f"first, from the repository root (rules filter_split and train_tokenizer, ~1 minute; "
        f"or the whole demo: uv run snakemake):\n    uv run snakemake {targets}\n"
        "or pass --train, --dev and --tokenizer."
    )


def text_normalization() -> dict[str, Any]:
    """The workflow's ``text_normalization`` (config/config.yaml)."""
    with open(REPO / "config" / "config.yaml", encoding="utf-8") as f:
        return dict(yaml.safe_load(f)["text_normalization"])


def source_file(cut: Any, sample_rate: int) -> str | None:
    """The audio file of ``cut`` when the cut is that whole file, mono at ``sample_rate``."""
    rec = getattr(cut, "recording", None)
    if rec is None or len(rec.sources) != 1 or rec.sources[0].type != "file" or rec.transforms:
        return None
    whole = cut.start == 0 and abs(cut.duration - rec.duration) < 1e-6
    if not whole or rec.sampling_rate != sample_rate or rec.num_channels != 1:
        return None
    return str(Path(rec.sources[0].source).resolve())


def write_espnet_dir(cuts: Iterable[Any], out: Path, encoder: Any, sample_rate: int) -> int:
    """``cuts`` as an ESPnet2 data directory: ``wav.scp``, ``text`` (normalized as asrflow
    normalizes it), ``speech_shape`` (samples) and ``text_shape.bpe`` (tokens, vocabulary size:
    what ``asr.sh`` gives the ``numel`` sampler). A cut that is not a whole audio file is written
    as a 16-bit WAV under ``out/wav``. Returns how many were written so."""
    import soundfile as sf

    from asrflow.data.cuts import text
    from asrflow.text import normalize

    out.mkdir(parents=True, exist_ok=True)
    vocab = len(encoder.tokens)
    rows: dict[str, list[str]] = {
        "wav.scp": [],
        "text": [],
        "speech_shape": [],
        "text_shape.bpe": [],
    }
    written = 0
    for cut in sorted(cuts, key=lambda c: c.id):
        path = source_file(cut, sample_rate)
        if path is None:
            audio = cut.resample(sample_rate).load_audio()[0]
            path = str((out / "wav" / f"{cut.id}.wav").resolve())
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            sf.write(path, audio, sample_rate, subtype="PCM_16")
            samples, written = len(audio), written + 1
        else:
            samples = cut.recording.num_samples
        tokens = len(encoder.encode(text(cut)))
        rows["wav.scp"].append(f"{cut.id} {path}")
        rows["text"].append(f"{cut.id} {normalize(text(cut), encoder.normalization)}")
        rows["speech_shape"].append(f"{cut.id} {samples}")
        rows["text_shape.bpe"].append(f"{cut.id} {tokens},{vocab}")
    for name, lines in rows.items():
        (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written


def mean_batch_audio(batches: Sequence[Sequence[str]], samples: dict[str, int], sr: int) -> float:
    return sum(samples[u] for b in batches for u in b) / sr / max(len(batches), 1)


def calibrate_espnet(
    data: Path, batch_type: str, target: float, sample_rate: int
) -> tuple[int, float, int]:
    """The ``--batch_bins`` (numel) or ``--batch_size`` (folded) whose ESPnet2 batches hold on
    average the closest to ``target`` audio seconds: (size, mean seconds, batches per epoch)."""
    from espnet2.samplers.build_batch_sampler import build_batch_sampler

    shapes = [str(data / "speech_shape"), str(data / "text_shape.bpe")]
    samples = {}
    for line in (data / "speech_shape").read_text(encoding="utf-8").splitlines():
        utt, n = line.split()
        samples[utt] = int(n)

    def batches(size: int) -> list[Any]:
        sampler = build_batch_sampler(
            type=batch_type,
            batch_size=size if batch_type == "folded" else 1,
            batch_bins=size if batch_type == "numel" else 1,
            shape_files=shapes,
            sort_in_batch="descending",
            sort_batch="descending",
            fold_lengths=FOLD_LENGTHS,
        )
        return list(sampler)

    logging.disable(logging.INFO)  # the sampler logs itself at each try
    try:
        lo, hi = 1, (len(samples) if batch_type == "folded" else 2**31 - 1)
        while lo < hi:  # the smallest size whose mean reaches the target
            mid = (lo + hi) // 2
            if mean_batch_audio(batches(mid), samples, sample_rate) < target:
                lo = mid + 1
            else:
                hi = mid
        options = [(s, batches(s)) for s in {max(lo - 1, 1), lo}]
    finally:
        logging.disable(logging.NOTSET)
    size, chosen = min(
        options, key=lambda o: abs(mean_batch_audio(o[1], samples, sample_rate) - target)
    )
    return size, mean_batch_audio(chosen, samples, sample_rate), len(chosen)


def asrflow_epoch_audio(spec: RunSpec, recipe: Recipe) -> tuple[float, int]:
    """Mean audio seconds per batch of asrflow's train sampler over its first epoch, and the
    number of batches (no audio is read)."""
    from asrflow.train.batches.loader import load_train_cuts, make_sampler

    sampler = make_sampler(load_train_cuts(spec), recipe.batching, world_size=1, rank=0)
    sampler.set_epoch(0)
    seconds = [sum(c.duration for c in cuts) for cuts in sampler]
    return sum(seconds) / len(seconds), len(seconds)


# --- timing ---------------------------------------------------------------------------------------


@dataclass
class Timed:
    """What a :class:`StepClock` recorded in one run: per training forward, when it started, the
    batch's speech lengths (samples) and its padded size (samples)."""

    label: str
    sample_rate: int
    starts: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    """CPU seconds of this process (every thread: ``time.process_time``) at each start."""
    lengths: list[tuple[int, ...]] = field(default_factory=list)
    padded: list[int] = field(default_factory=list)
    launched: float = field(default_factory=time.perf_counter)
    profile: dict[str, list[float]] = field(default_factory=dict)
    """A profiled run's durations per action (Lightning's ``SimpleProfiler``)."""
    peak_bytes: int = 0
    """On a GPU: the most memory the loop had allocated (``torch.cuda.max_memory_allocated``)."""

    def window(self, warmup: int, steps: int) -> dict[str, list[float]]:
        """The timed steps: seconds (forward start to the next forward start), audio seconds,
        padded seconds and utterances of steps ``warmup .. warmup + steps - 1``."""
        if len(self.starts) < warmup + steps + 1:
            raise RuntimeError(
                f"{self.label}: {len(self.starts)} training forwards, need {warmup + steps + 1}"
            )
        sr, span = self.sample_rate, range(warmup, warmup + steps)
        cpu = self.cpu if len(self.cpu) == len(self.starts) else [math.nan] * len(self.starts)
        return {
            "seconds": [self.starts[i + 1] - self.starts[i] for i in span],
            "cpu": [cpu[i + 1] - cpu[i] for i in span],
            "audio": [sum(self.lengths[i]) / sr for i in span],
            "padded": [self.padded[i] / sr for i in span],
            "utts": [float(len(self.lengths[i])) for i in span],
        }

    @property
    def setup_seconds(self) -> float:
        return self.starts[0] - self.launched if self.starts else math.nan


class StepClock:
    """A forward pre-hook that records a :class:`Timed` entry per training-mode forward."""

    def __init__(self, timed: Timed) -> None:
        self.timed = timed

    def attach(self, model: torch.nn.Module) -> None:
        model.register_forward_pre_hook(self._tick, with_kwargs=True)

    def _tick(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if not module.training:
            return
        t, cpu = time.perf_counter(), time.process_time()
        speech = kwargs["speech"] if "speech" in kwargs else args[0]
        lengths = kwargs["speech_lengths"] if "speech_lengths" in kwargs else args[1]
        self.timed.starts.append(t)
        self.timed.cpu.append(cpu)
        self.timed.lengths.append(tuple(int(x) for x in lengths.tolist()))
        self.timed.padded.append(int(speech.shape[0] * speech.shape[1]))


# --- the loops ------------------------------------------------------------------------------------


def espnet_command(
    recipe: Recipe,
    spec: RunSpec,
    data: Path,
    out: Path,
    batch_type: str,
    size: int,
    n: int,
    device: str = "cpu",
) -> list[str]:
    """``asr_train`` arguments: the recipe's ESPnet keys and its optimizer, grad clip and
    workers in a config file (as ESPnet recipes keep ``conf/train_asr.yaml``), ``n`` steps.
    ``device`` cuda: one GPU with ESPnet's AMP, which autocasts to bfloat16 on a GPU that has
    it (``espnet2.train.trainer.autocast_args``): the counterpart of Lightning's bf16-mixed."""
    from asrflow.recipe.sections import warmup_steps

    o = recipe.optim
    config = {
        **recipe.model,
        "optim": "adamw",
        "optim_conf": {
            "lr": scaled_lr(recipe),
            "betas": list(o.betas),
            "eps": o.eps,
            "weight_decay": o.weight_decay,
        },
        "scheduler": "warmuplr",
        "scheduler_conf": {
            "warmup_steps": warmup_steps(recipe.scheduler, recipe.trainer.max_steps)
        },
        "grad_clip": recipe.trainer.gradient_clip_val,
        "accum_grad": 1,
    }
    out.mkdir(parents=True, exist_ok=True)
    config_path = out.parent / "train_asr.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    train, dev = data / "train", data / "dev"
    size_arg = "--batch_bins" if batch_type == "numel" else "--batch_size"
    return [
        "--config", str(config_path), "--output_dir", str(out),
        "--token_list", str(Path(spec.tokens).resolve()), "--token_type", "bpe",
        "--bpemodel", str(Path(spec.bpe_model).resolve()),
        "--train_data_path_and_name_and_type", f"{train}/wav.scp,speech,sound",
        "--train_data_path_and_name_and_type", f"{train}/text,text,text",
        "--train_shape_file", f"{train}/speech_shape",
        "--train_shape_file", f"{train}/text_shape.bpe",
        "--valid_data_path_and_name_and_type", f"{dev}/wav.scp,speech,sound",
        "--valid_data_path_and_name_and_type", f"{dev}/text,text,text",
        "--valid_shape_file", f"{dev}/speech_shape",
        "--valid_shape_file", f"{dev}/text_shape.bpe",
        "--batch_type", batch_type, size_arg, str(size),
        "--fold_length", str(FOLD_LENGTHS[0]), "--fold_length", str(FOLD_LENGTHS[1]),
        "--num_iters_per_epoch", str(n), "--max_epoch", "1",
        "--num_workers", str(recipe.batching.num_workers),
        *(["--ngpu", "1", "--use_amp", "true"] if device == "cuda" else
          ["--ngpu", "0", "--use_amp", "false"]),
        "--train_dtype", "float32",
        "--seed", str(recipe.trainer.seed),
        "--keep_nbest_models", "1", "--num_att_plot", "0", "--use_matplotlib", "false",
    ]  # fmt: skip


def run_espnet(cmd: list[str], timed: Timed) -> Timed:
    """ESPnet2's trainer, ``ASRTask.main(cmd=...)``, with a clock on the model it builds."""
    from espnet2.tasks.asr import ASRTask

    clock = StepClock(timed)

    class TimedASRTask(ASRTask):
        @classmethod
        def build_model(cls, args: argparse.Namespace) -> Any:
            model = super().build_model(args)
            clock.attach(model)
            return model

    out = Path(cmd[cmd.index("--output_dir") + 1])
    shutil.rmtree(out, ignore_errors=True)
    timed.launched = time.perf_counter()
    TimedASRTask.main(cmd=cmd)
    return timed


def espnet_iterator(cmd: list[str]) -> Any:
    """The train iterator of epoch 1 that ESPnet2's trainer builds from ``cmd`` (its own
    ``build_iter_factory``), yielding ``(utterance IDs, batch)``."""
    from espnet2.tasks.asr import ASRTask
    from espnet2.train.distributed_utils import DistributedOption, resolve_distributed_mode
    from espnet2.utils.build_dataclass import build_dataclass

    args = ASRTask.get_parser().parse_args(cmd)
    resolve_distributed_mode(args)  # as ASRTask.main does
    option = build_dataclass(DistributedOption, args)
    option.init_options()
    factory = ASRTask.build_iter_factory(args=args, distributed_option=option, mode="train")
    return factory.build_iter(1)


def espnet_batches(cmd: list[str], n: int) -> list[dict[str, Any]]:
    """The first ``n`` batches ESPnet2's trainer trains on with ``cmd``."""
    batches = []
    for _, batch in espnet_iterator(cmd):
        batches.append({k: batch[k] for k in ("speech", "speech_lengths", "text", "text_lengths")})
        if len(batches) == n:
            break
    return batches


@dataclass(frozen=True)
class Variant:
    """An asrflow run: whole (as ``rule train``), with parts taken away, or profiled."""

    label: str
    preloaded: bool = False
    extras: bool = True
    """Callbacks, loggers, the module's metrics row, diagnostics and ``self.log``."""
    profiled: bool = False


ASRFLOW = Variant("asrflow (rule train)")
PRELOADED = Variant("asrflow, batches preloaded", preloaded=True)
NO_EXTRAS = Variant("asrflow, preloaded, no extras", preloaded=True, extras=False)
PROFILED = Variant("asrflow (rule train), profiled", profiled=True)


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


class Preloaded:
    """Batches loaded beforehand, as one iterable (a plain list is several loaders to
    Lightning)."""

    def __init__(self, batches: list[dict[str, Any]]) -> None:
        self.batches = batches

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _profiled(profiler: Any, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        with profiler.profile(action):
            return fn(*args, **kwargs)

    return call


def run_asrflow(
    spec: RunSpec,
    recipe: Recipe,
    work: Path,
    n: int,
    timed: Timed,
    variant: Variant = ASRFLOW,
    batches: list[dict[str, Any]] | None = None,
    device: str = "cpu",
) -> Timed:
    """``n`` steps of the Trainer ``rule train`` builds (validation once, at the end), on the
    CPU in fp32 (``device`` cpu) or as the recipe says on a GPU (cuda; bf16-mixed for
    ``precision: auto``).

    ``variant.extras`` False: no callbacks (so no metrics row, diagnostics, exact resume or
    checkpoints), no loggers, and the module's ``self.log`` calls are no-ops (gradient clipping
    stays, as in the bare loop; it computes the logged grad norm). ``variant.profiled``: Lightning's
    ``SimpleProfiler`` times its hooks and the data fetch, and times the model's forward, the
    loggers' ``log_metrics``, ``self.log``/``log_dict`` and the diagnostics besides (into
    ``timed.profile``)."""
    from lightning.pytorch.profilers import SimpleProfiler

    from asrflow.artifacts import CHECKPOINTS, LAST_CHECKPOINT
    from asrflow.train.cluster import cpu_fallback
    from asrflow.train.loop.failures import PreemptionCheckpoint, RankFailures
    from asrflow.train.loop.parts import build_trainer_parts
    from asrflow.train.loop.trainer import trainer_kwargs
    from asrflow.train.run.runner import _trainer

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    timed.launched = time.perf_counter()
    parts = build_trainer_parts(spec, work)
    module = parts["module"]
    StepClock(timed).attach(module.model)
    kwargs, _ = cpu_fallback(trainer_kwargs(recipe))
    if device == "cpu":  # also where a GPU is present
        kwargs.update(accelerator="cpu", precision="32-true")
    kwargs.update(devices=1, num_nodes=1)  # one process, as the other loops (a100: 4 GPUs)
    # the recipe's schedule; the Trainer stops after n steps and validates then, not before
    kwargs.update(max_steps=n, val_check_interval=n)
    kwargs.update(enable_progress_bar=False, enable_model_summary=False)  # stdout: the table
    extra = [PreemptionCheckpoint(work / CHECKPOINTS / LAST_CHECKPOINT), RankFailures()]
    if not variant.extras:
        parts["loggers"], parts["callbacks"], extra = False, [], []
        module.log = module.log_dict = _ignore
    profiler = None
    if variant.profiled:
        profiler = kwargs["profiler"] = SimpleProfiler(dirpath=work, filename="profile")
        module.log = _profiled(profiler, "[asrflow] self.log", module.log)
        module.log_dict = _profiled(profiler, "[asrflow] self.log_dict", module.log_dict)
        diagnostics = parts["diagnostics"]
        diagnostics.observe_loss = _profiled(
            profiler, "[asrflow] diagnostics.observe_loss", diagnostics.observe_loss
        )
        for logger in parts["loggers"]:
            name = f"[Logger] {type(logger).__name__}.log_metrics"
            logger.log_metrics = _profiled(profiler, name, logger.log_metrics)
        forward = "[model] forward"
        module.model.register_forward_pre_hook(lambda *_: profiler.start(forward))
        module.model.register_forward_hook(lambda *_: profiler.stop(forward))
    trainer = _trainer(work, parts, extra, kwargs)
    preloaded = variant.preloaded and batches is not None
    train = Preloaded(batches[:n]) if preloaded else parts["train_loader"]
    trainer.fit(module, train, parts["dev_loader"])
    if profiler is not None:
        timed.profile = dict(profiler.recorded_durations)
    return timed


def asrflow_batches(spec: RunSpec, recipe: Recipe, work: Path, n: int) -> list[dict[str, Any]]:
    """The first ``n`` batches of asrflow's train loader, epochs as Lightning sets them."""
    from asrflow.train.loop.parts import build_trainer_parts

    parts = build_trainer_parts(spec, work)
    loader, batches, epoch = parts["train_loader"], [], 0
    while len(batches) < n:
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            batches.append(batch)
            if len(batches) == n:
                break
        epoch += 1
    return batches


def run_bare(
    spec: RunSpec,
    recipe: Recipe,
    batches: list[dict[str, Any]],
    timed: Timed,
    device: str = "cpu",
) -> Timed:
    """Forward, backward, grad clip, optimizer and LR step on ``batches``: asrflow's model,
    optimizer, schedule and per-token loss, nothing else. ``device`` cuda: the model on the
    GPU, each batch copied there at its step, the forward under bfloat16 autocast (as
    Lightning's bf16-mixed)."""
    import lightning as L

    from asrflow.train.loop.loss import per_token
    from asrflow.train.loop.model import build_model
    from asrflow.train.loop.schedule import build_optimizer, build_scheduler

    timed.launched = time.perf_counter()
    L.seed_everything(recipe.trainer.seed, verbose=False)
    model, _ = build_model(recipe.model, spec.tokens, spec.bpe_model)
    model.to(device)
    StepClock(timed).attach(model)
    optimizer = build_optimizer(model.parameters(), recipe.optim, scaled_lr(recipe))
    scheduler = build_scheduler(optimizer, recipe)["scheduler"]
    clip = recipe.trainer.gradient_clip_val
    params = [p for p in model.parameters() if p.requires_grad]
    steps = [
        (
            b["speech"],
            b["speech_lengths"],
            b["text"],
            b["text_lengths"],
            int(b["text_lengths"].sum()),
        )
        for b in batches
    ]
    model.train()
    for *tensors, tokens in steps:
        speech, speech_lengths, text, text_lengths = (t.to(device) for t in tensors)
        with autocast(device):
            loss_utt, _, _ = model(speech, speech_lengths, text, text_lengths)
        per_token(loss_utt, len(speech_lengths), tokens).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
    return timed


def autocast(device: str) -> Any:
    """bfloat16 autocast on a GPU (Lightning's bf16-mixed, ESPnet's AMP there); none on the
    CPU, where both trainers run in fp32."""
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}
"""Dense bf16 peak of a GPU by a name its ``torch.cuda.get_device_name`` contains (vendor data
sheets, without sparsity): the denominator of model FLOPs utilisation."""


def peak_flops(device: str, given_tflops: float | None) -> float | None:
    """The peak FLOP/s that utilisation is measured against: ``--peak-tflops``, else the GPU's
    entry in :data:`PEAK_BF16_TFLOPS`; None (no utilisation printed) when neither is known."""
    if given_tflops:
        return given_tflops * 1e12
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((t * 1e12 for key, t in PEAK_BF16_TFLOPS.items() if key in name), None)


def flops_per_audio_second(
    spec: RunSpec, recipe: Recipe, batches: list[dict[str, Any]], sr: int, device: str
) -> float:
    """Model FLOPs of one training step (forward and backward, as ``torch.utils.flop_counter``
    counts them: matrix multiplies and convolutions) per second of audio, over ``batches``."""
    from torch.utils.flop_counter import FlopCounterMode

    from asrflow.train.loop.loss import per_token
    from asrflow.train.loop.model import build_model

    model, _ = build_model(recipe.model, spec.tokens, spec.bpe_model)
    model.to(device).train()
    counter = FlopCounterMode(display=False)
    audio = 0.0
    with counter:
        for b in batches:
            speech, lengths, text, text_lengths = (
                b[k].to(device) for k in ("speech", "speech_lengths", "text", "text_lengths")
            )
            with autocast(device):
                loss_utt, _, _ = model(speech, lengths, text.clone(), text_lengths)
            per_token(loss_utt, len(lengths), int(text_lengths.sum())).backward()
            audio += float(b["speech_lengths"].sum()) / sr
    return counter.get_total_flops() / audio


# --- the report -----------------------------------------------------------------------------------


@dataclass
class Row:
    """One loop's timed steps, per round. Figures are medians over the rounds of each round's
    figure, and ratios medians over the rounds of each round's ratio (the loops of a round run
    minutes apart, the rounds further apart): a round disturbed by another process on the
    machine moves them little once there are three rounds or more."""

    label: str
    rounds: list[Timed]
    warmup: int
    steps: int

    def __post_init__(self) -> None:
        self.windows = [t.window(self.warmup, self.steps) for t in self.rounds]

    def pooled(self, key: str) -> list[float]:
        return [x for w in self.windows for x in w[key]]

    def per_round(self, figure: Callable[[dict[str, list[float]]], float]) -> list[float]:
        return [figure(w) for w in self.windows]

    @property
    def median(self) -> float:
        """Seconds per step: the median step."""
        return statistics.median(self.per_round(lambda w: statistics.median(w["seconds"])))

    @property
    def mean(self) -> float:
        return statistics.median(self.per_round(lambda w: statistics.fmean(w["seconds"])))

    @property
    def audio(self) -> float:
        return statistics.fmean(self.pooled("audio"))

    def seconds_per_audio(self) -> list[float]:
        """Each round's seconds of training per audio second (all its timed steps)."""
        return self.per_round(lambda w: sum(w["seconds"]) / sum(w["audio"]))

    def cpu_per_audio(self) -> list[float]:
        """Each round's CPU seconds of the process (all its threads) per audio second: what a
        busy machine moves far less than wall time (though threads that spin while they wait
        for a core count too)."""
        return self.per_round(lambda w: sum(w["cpu"]) / sum(w["audio"]))

    def cpu_ratios(self, other: Row) -> list[float]:
        """Round by round, this loop's CPU time / the other's on the same steps."""
        return [
            sum(a["cpu"]) / sum(b["cpu"]) for a, b in zip(self.windows, other.windows, strict=True)
        ]

    def seconds_per_audio_median(self) -> list[float]:
        """Each round's median seconds per step / mean audio seconds per step."""
        return self.per_round(
            lambda w: statistics.median(w["seconds"]) / statistics.fmean(w["audio"])
        )

    @property
    def padding(self) -> float:
        return 1.0 - sum(self.pooled("audio")) / sum(self.pooled("padded"))

    def same_batches(self, other: Row) -> bool:
        return all(
            a.lengths[: self.warmup + self.steps] == b.lengths[: self.warmup + self.steps]
            for a, b in zip(self.rounds, other.rounds, strict=True)
        )

    def paired(self, other: Row, how: Callable[[float, float], float]) -> float:
        """``how(this step, the other loop's same step)``: the median over each round's steps,
        then over the rounds."""
        return statistics.median(
            statistics.median(how(x, y) for x, y in zip(a["seconds"], b["seconds"], strict=True))
            for a, b in zip(self.windows, other.windows, strict=True)
        )

    def total_ratios(self, other: Row) -> list[float]:
        """Round by round, this loop's time / the other's on the same steps."""
        return [
            sum(a["seconds"]) / sum(b["seconds"])
            for a, b in zip(self.windows, other.windows, strict=True)
        ]


def ratios(a: list[float], b: list[float]) -> list[float]:
    """Round by round ``a / b``."""
    return [x / y for x, y in zip(a, b, strict=True)]


def ratio(a: list[float], b: list[float]) -> float:
    """The median over the rounds of round by round ``a / b``."""
    return statistics.median(ratios(a, b))


def spread(per_round: list[float], limit: float | None = None) -> str:
    """The rounds' range and, against a goal, in how many rounds it holds: how far one run's
    median can be trusted (a goal met by the median but not in most rounds is not reliably met).

    >>> spread([1.02, 1.07, 1.04], 1.05)
    'rounds 1.020-1.070x, 2 of 3 within the goal'
    """
    text = f"rounds {min(per_round):.3f}-{max(per_round):.3f}x"
    if limit is not None:
        text += f", {sum(r <= limit for r in per_round)} of {len(per_round)} within the goal"
    return text


PERFORMANCE_COLUMNS = (
    ("what", "what (script)"),
    ("asrflow", "asrflow"),
    ("against", "against"),
    ("ratio", "ratio"),
    ("goal", "goal"),
    ("machine", "machine"),
    ("date", "date"),
    ("commit", "commit"),
    ("load", "load"),
)
"""The columns of ``docs/figures/performance_training.json`` (this script's and worker_start's)."""


def print_table(rows: list[Row], base: Row) -> None:
    head = (
        f"{'loop':<28}{'s/step':>8}{'mean':>8}  {'rounds (median s/step)':<30}{'audio s':>8}"
        f"{'utts':>6}{'padding':>9}{'audio s/s':>10}{'per audio s vs ESPnet2':>24}{'start s':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        per_round = " ".join(f"{statistics.median(w['seconds']):.3f}" for w in r.windows)
        setup = statistics.fmean(t.setup_seconds for t in r.rounds)
        vs = ratio(r.seconds_per_audio(), base.seconds_per_audio())
        vs_median = ratio(r.seconds_per_audio_median(), base.seconds_per_audio_median())
        throughput = 1 / statistics.median(r.seconds_per_audio())
        print(
            f"{r.label:<28}{r.median:>8.4f}{r.mean:>8.4f}  {per_round:<30}{r.audio:>8.2f}"
            f"{statistics.fmean(r.pooled('utts')):>6.1f}{100 * r.padding:>8.1f}%"
            f"{throughput:>10.0f}{vs:>13.3f}x ({vs_median:.3f}x){setup:>8.1f}"
        )


def print_device(rows: list[Row], model_flops: float, peak: float | None, given: bool) -> None:
    """Model FLOPs per audio second and, against a known peak, each loop's model FLOPs
    utilisation (its audio seconds per wall second x FLOPs per audio second / peak); on a GPU
    also each loop's peak memory (the most over its rounds)."""
    print(
        f"model FLOPs per audio second (forward + backward, torch.utils.flop_counter over 4 "
        f"batches): {model_flops / 1e9:.2f} GFLOP"
    )
    if peak is not None:
        source = "--peak-tflops" if given else "the GPU's dense bf16 peak"
        print(f"model FLOPs utilisation against {peak / 1e12:g} TFLOP/s ({source}):")
    for r in rows:
        throughput = 1 / statistics.median(r.seconds_per_audio())
        parts = []
        if peak is not None:
            parts.append(f"MFU {100 * model_flops * throughput / peak:.2f} %")
        memory = max(t.peak_bytes for t in r.rounds)
        if memory:
            parts.append(f"peak memory {memory / 2**30:.2f} GiB")
        if parts:
            print(f"  {r.label:<28}{', '.join(parts)}")
    print()


def print_ratios(espnet: Row, asrflow: Row, bare_a: Row, bare_e: Row) -> None:
    """The goals' ratios (medians over the rounds): time per audio second (all timed steps)
    and, on the same batches, the time of all timed steps (and the median of per-step ratios)."""

    def line(what: str, per_round: list[float], note: str, limit: float | None = None) -> None:
        value = statistics.median(per_round)
        note = f"{spread(per_round, limit)}; {note}"
        if limit is not None:
            met = "met" if value <= limit else "NOT met"
            note = f"goal <= {limit:.2f}x: {met}; {note}"
        print(f"{what:<54}{value:6.3f}x  ({note})")

    median = ratio(asrflow.seconds_per_audio_median(), espnet.seconds_per_audio_median())
    line(
        "asrflow / ESPnet2 trainer, time per audio second",
        ratios(asrflow.seconds_per_audio(), espnet.seconds_per_audio()),
        f"from the median steps: {median:.3f}x",
        1.0,
    )
    line(
        "asrflow / ESPnet2 trainer, CPU time per audio second",
        ratios(asrflow.cpu_per_audio(), espnet.cpu_per_audio()),
        "the process's CPU time, every thread",
        1.0,
    )
    for loop, bare, limit in ((asrflow, bare_a, 1.05), (espnet, bare_e, None)):
        name = loop.label.split(" (")[0]
        if not loop.same_batches(bare):
            print(f"{name} / {bare.label}: other batches (a bug), no ratio")
            continue
        extra = loop.paired(bare, lambda x, y: x - y)
        per_step = loop.paired(bare, lambda x, y: x / y)
        line(
            f"{name} / bare loop on the same batches",
            loop.total_ratios(bare),
            f"per step: median {per_step:.3f}x, {1000 * extra:+.1f} ms",
            limit,
        )
        line(f"{name} / bare loop, CPU time", loop.cpu_ratios(bare), "the same steps")
    line(
        "bare loop, asrflow's / ESPnet2's batches, per audio s",
        ratios(bare_a.seconds_per_audio(), bare_e.seconds_per_audio()),
        f"padding {100 * bare_a.padding:.1f} % vs {100 * bare_e.padding:.1f} %, "
        f"{statistics.fmean(bare_a.pooled('utts')):.1f} vs "
        f"{statistics.fmean(bare_e.pooled('utts')):.1f} utterances per batch",
    )


def figures_rows(
    espnet: Row, asrflow: Row, bare_a: Row, bare_e: Row, what: str
) -> list[dict[str, Any]]:
    """The rows of ``results/bench/espnet_speed.json`` (:data:`PERFORMANCE_COLUMNS`; ``main``
    adds machine, date, commit and load): what :func:`print_table` and :func:`print_ratios`
    print, as the docs' training table words it; a row for the step time against ESPnet2's
    trainer (``what`` says on what) and a row for the loop's own overhead over the bare loop."""

    def step(r: Row) -> str:
        rate = 1 / statistics.median(r.seconds_per_audio())
        return (
            f"{r.median:.4f} s/step (median), {rate:.0f} audio s/s; {100 * r.padding:.1f} % padding"
        )

    def against(per_round: list[float], limit: float) -> str:
        met = "met" if statistics.median(per_round) <= limit else "not met"
        within = sum(r <= limit for r in per_round)
        return f"<= {limit:g}x: {met} ({within} of {len(per_round)} rounds within)"

    def spread_of(per_round: list[float]) -> str:
        return spread(per_round).removeprefix("rounds ")

    per_audio = ratios(asrflow.seconds_per_audio(), espnet.seconds_per_audio())
    cpu = ratios(asrflow.cpu_per_audio(), espnet.cpu_per_audio())
    median_steps = ratio(asrflow.seconds_per_audio_median(), espnet.seconds_per_audio_median())
    padding = ratios(bare_a.seconds_per_audio(), bare_e.seconds_per_audio())
    ratio_text = (
        f"{statistics.median(cpu):.3f}x the CPU time per audio second (rounds "
        f"{spread_of(cpu)}), {statistics.median(per_audio):.3f}x the wall time (rounds "
        f"{spread_of(per_audio)}; median steps {median_steps:.3f}x); the bare loop on asrflow's "
        f"batches {statistics.median(padding):.3f}x its time on ESPnet2's (rounds "
        f"{spread_of(padding)})"
    )
    rows = [
        {
            "what": what,
            "asrflow": step(asrflow),
            "against": f"ESPnet2's trainer: {step(espnet)}",
            "ratio": ratio_text,
            "goal": f"CPU {against(cpu, 1.0)}",
        }
    ]
    if not (asrflow.same_batches(bare_a) and espnet.same_batches(bare_e)):
        return rows  # no overhead row: a bug, print_ratios says so
    extra = {r.label: 1000 * r.paired(bare, lambda x, y: x - y) for r, bare in
             ((asrflow, bare_a), (espnet, bare_e))}  # fmt: skip
    over = {r.label: r.total_ratios(bare) for r, bare in ((asrflow, bare_a), (espnet, bare_e))}
    a, e = over[asrflow.label], over[espnet.label]
    cpu_a, cpu_e = asrflow.cpu_ratios(bare_a), espnet.cpu_ratios(bare_e)
    rows.append(
        {
            "what": "the loop's own overhead, the same run",
            "asrflow": (
                f"{extra[asrflow.label]:+.1f} ms/step (median of per-step differences) over the "
                "bare loop on the same batches"
            ),
            "against": f"ESPnet2's trainer: {extra[espnet.label]:+.1f} ms/step",
            "ratio": (
                f"{statistics.median(a):.3f}x the bare loop (rounds {spread_of(a)}; ESPnet2: "
                f"{statistics.median(e):.3f}x, rounds {spread_of(e)}); CPU time "
                f"{statistics.median(cpu_a):.3f}x (ESPnet2: {statistics.median(cpu_e):.3f}x)"
            ),
            "goal": against(a, 1.05),
        }
    )
    return rows


def print_breakdown(
    asrflow: Row, preloaded: Row, no_extras: Row, bare: Row, profiled: Row, loading: dict
) -> None:
    """Where asrflow's step goes: three ablations on the same batches, the loaders' own time,
    then the profiled run's actions."""
    print("where asrflow's step goes (per-step differences on the same batches, medians):")
    for what, slow, fast in (
        ("loader (asrflow's DataLoader vs its batches preloaded)", asrflow, preloaded),
        ("extras (callbacks, loggers, metrics row, diagnostics, self.log)", preloaded, no_extras),
        ("Lightning's loop (no extras vs the bare loop)", no_extras, bare),
    ):
        if not slow.same_batches(fast):
            print(f"  {what}: other batches (a bug)")
            continue
        cost = slow.paired(fast, lambda x, y: x - y)
        per_step = slow.paired(fast, lambda x, y: x / y)
        print(f"  {what:<64}{1000 * cost:+7.1f} ms/step  ({per_step:.3f}x)")
    print(
        "  a batch loaded in the main process (no worker, median): asrflow "
        f"{1000 * loading['asrflow']:.1f} ms, ESPnet2 {1000 * loading['espnet']:.1f} ms"
    )
    (timed,) = profiled.rounds
    window = timed.window(profiled.warmup, profiled.steps)["seconds"]
    print(
        f"profiled asrflow run (Lightning's SimpleProfiler and timers on the model's forward, "
        f"the loggers, self.log and the diagnostics; ms per step over steps {profiled.warmup + 1}"
        f"-{profiled.warmup + profiled.steps}; actions nest; its step: median "
        f"{1000 * statistics.median(window):.1f}, mean {1000 * statistics.fmean(window):.1f} ms)"
    )
    n = profiled.warmup + profiled.steps + 1
    costs = []
    for action, durations in timed.profile.items():
        calls = len(durations) / n
        if calls < 0.99:  # once per epoch or validation
            continue
        cost = sum(durations[round(profiled.warmup * calls) :]) / profiled.steps
        costs.append((cost, action, calls))
    for cost, action, calls in sorted(costs, reverse=True):
        if cost >= 5e-5:
            print(f"  {action:<72}{1000 * cost:8.2f} ms{calls:6.1f} calls")


def loading_seconds(
    spec: RunSpec, recipe: Recipe, work: Path, cmd: list[str], count: int = 40
) -> dict[str, float]:
    """Median seconds to load one batch in this process: asrflow's dataset on its sampler's
    batches, ESPnet2's iterator with ``--num_workers 0`` (what a worker spends on a batch)."""
    from asrflow.train.loop.parts import build_trainer_parts

    parts = build_trainer_parts(spec, work)
    loader = parts["train_loader"]
    sampler, dataset = loader.sampler, loader.dataset
    sampler.set_epoch(0)
    seconds = {"asrflow": [], "espnet": []}
    for k, cuts in enumerate(sampler):
        start = time.perf_counter()
        dataset[cuts]
        seconds["asrflow"].append(time.perf_counter() - start)
        if k + 1 == count:
            break
    cmd = list(cmd)
    cmd[cmd.index("--num_workers") + 1] = "0"
    batches = iter(espnet_iterator(cmd))  # an epoch of the run's steps: maybe under count
    while len(seconds["espnet"]) < count:
        start = time.perf_counter()
        if next(batches, None) is None:
            break
        seconds["espnet"].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in seconds.items()}


# --- the header -----------------------------------------------------------------------------------


def versions() -> str:
    import espnet
    import lhotse
    import lightning

    return (
        f"torch {torch.__version__}, ESPnet {espnet.__version__}, "
        f"Lightning {lightning.__version__}, Lhotse {lhotse.__version__}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    results = REPO / layout.RESULTS
    parser.add_argument("--recipe", default=str(REPO / RECIPE))
    parser.add_argument("--train", default=str(REPO / layout.filtered(CORPUS, "train")))
    parser.add_argument("--dev", default=str(REPO / layout.filtered(CORPUS, "dev")))
    parser.add_argument("--tokenizer", default=str(results / "tokenizers" / TOKENIZER))
    parser.add_argument("--steps", type=int, default=150, help="timed steps per loop and round")
    parser.add_argument("--warmup", type=int, default=20, help="steps left out of the figures")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, every loop")
    parser.add_argument("--quick", action="store_true", help="40 steps after 10, 2 rounds")
    parser.add_argument("--breakdown", action="store_true", help="asrflow with parts removed")
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: every loop on one GPU, bf16 autocast (the a100 recipe: --recipe "
        "config/recipes/a100_conformer.yaml); cpu: fp32",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="peak FLOP/s for model FLOPs utilisation (default on a GPU: its dense bf16 peak)",
    )
    parser.add_argument("--batch-type", choices=["numel", "folded"], default="numel")
    parser.add_argument("--dev-cuts", type=int, default=8, help="dev cuts validated at the end")
    parser.add_argument("--workdir", help="kept afterwards (default: a temporary directory)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override (YAML)"
    )
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds = 40, 10, 2
    if args.steps < 2 or args.warmup < 1 or args.rounds < 1:
        parser.error("need --steps >= 2, --warmup >= 1, --rounds >= 1")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s"
    )
    tok = Path(args.tokenizer)
    inputs = {
        "recipe": Path(args.recipe),
        "train": Path(args.train),
        "dev": Path(args.dev),
        "bpe_model": tok / "bpe.model",
        "tokens": tok / "tokens.txt",
    }
    check_inputs(inputs)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("espnet_speed: --device cuda, but torch sees no usable CUDA GPU here")
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # as rule train does, for child processes
    work = Path(args.workdir or tempfile.mkdtemp(prefix="asrflow-espnet-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        benchmark(args, inputs, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def benchmark(args: argparse.Namespace, inputs: dict[str, Path], work: Path) -> None:
    from asrflow.data.cuts import load_cuts
    from asrflow.export.find import model_sample_rate
    from asrflow.text import TextNormalization
    from asrflow.tokens import TokenEncoder
    from asrflow.train.batches.loader import load_train_cuts
    from asrflow.train.loop.model import build_model, num_parameters

    started, load_before = datetime.datetime.now().astimezone(), load()
    overrides = dotted_overrides(args.set)  # e.g. batching.num_buckets=30
    recipe = load_recipe(inputs["recipe"], overrides)
    spec = RunSpec(
        name="espnet_speed",
        recipe=recipe,
        recipe_name=str(inputs["recipe"]),
        train_cuts=[str(inputs["train"])],
        dev_cuts=str(inputs["dev"]),
        bpe_model=str(inputs["bpe_model"]),
        tokens=str(inputs["tokens"]),
        normalization=text_normalization(),
        max_dev_cuts=args.dev_cuts,
    )
    n = args.warmup + args.steps + 1  # steps run per loop: the last one only ends the timing
    model, model_args = build_model(recipe.model, spec.tokens, spec.bpe_model)
    sr = model_sample_rate(model_args.frontend_conf)
    params = num_parameters(model)
    del model

    # ESPnet2's data directory, its batches sized to asrflow's audio per batch
    encoder = TokenEncoder(
        spec.bpe_model, spec.tokens, TextNormalization.from_dict(spec.normalization)
    )
    data = work / "espnet_data"
    written = write_espnet_dir(load_train_cuts(spec), data / "train", encoder, sr)
    dev = load_cuts(spec.dev_cuts)
    written += write_espnet_dir(
        dev.subset(first=min(args.dev_cuts, len(dev))), data / "dev", encoder, sr
    )
    target, asrflow_per_epoch = asrflow_epoch_audio(spec, recipe)
    size, espnet_audio, espnet_per_epoch = calibrate_espnet(
        data / "train", args.batch_type, target, sr
    )
    size_name = "batch_bins" if args.batch_type == "numel" else "batch_size"
    cmd = espnet_command(
        recipe, spec, data, work / "espnet" / "exp", args.batch_type, size, n, args.device
    )

    log.info("loading %d batches of each loader for the bare loop", n)
    batches_a = asrflow_batches(spec, recipe, work / "preload", n)
    batches_e = espnet_batches(cmd, n)
    gc.collect()
    dev = args.device
    model_flops = flops_per_audio_second(spec, recipe, batches_a[:4], sr, dev)
    peak = peak_flops(dev, args.peak_tflops)

    loops: list[tuple[str, Callable[[Timed], Timed]]] = [
        (f"ESPnet2 trainer ({args.batch_type})", lambda t: run_espnet(cmd, t)),
        (ASRFLOW.label, lambda t: run_asrflow(spec, recipe, work / "asrflow", n, t, device=dev)),
        ("bare loop, asrflow batches", lambda t: run_bare(spec, recipe, batches_a, t, dev)),
        ("bare loop, ESPnet2 batches", lambda t: run_bare(spec, recipe, batches_e, t, dev)),
    ]
    if args.breakdown:
        for v in (PRELOADED, NO_EXTRAS):
            loops.append(
                (
                    v.label,
                    lambda t, v=v: run_asrflow(
                        spec, recipe, work / "asrflow", n, t, v, batches_a, dev
                    ),
                )
            )
    timed: dict[str, list[Timed]] = {label: [] for label, _ in loops}
    for r in range(args.rounds):
        for label, run in loops:
            log.info("round %d of %d: %s, %d steps", r + 1, args.rounds, label, n)
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            timed[label].append(run(Timed(label, sr)))
            if dev == "cuda":
                timed[label][-1].peak_bytes = torch.cuda.max_memory_allocated()
                torch.cuda.empty_cache()
            gc.collect()
    loading: dict[str, float] = {}
    if args.breakdown:  # once, after the rounds: the profiler's own cost stays out of them
        loading = loading_seconds(spec, recipe, work / "loading", cmd)
        log.info("profiled: %s, %d steps", ASRFLOW.label, n)
        profiled = Timed(PROFILED.label, sr)
        timed[PROFILED.label] = [
            run_asrflow(spec, recipe, work / "asrflow", n, profiled, PROFILED, batches_a, dev)
        ]
    rows = {label: Row(label, runs, args.warmup, args.steps) for label, runs in timed.items()}
    (work / "timings.json").write_text(
        json.dumps(
            {label: [row.window(0, n - 1) for row in runs] for label, runs in timed.items()}
        ),
        encoding="utf-8",
    )  # every step, warm-up included, for a closer look (kept with --workdir)
    labels = [label for label, _ in loops]
    espnet, asrflow, bare_a, bare_e = (rows[label] for label in labels[:4])

    print()
    print(f"bench/espnet_speed.py, {started.isoformat(timespec='seconds')}, commit {commit()}")
    print(f"machine: {machine()}, {platform.platform()}")
    where = (
        f"bf16 autocast on {torch.cuda.get_device_name()}" if dev == "cuda" else "fp32 on the CPU"
    )
    print(f"{versions()}; {args.threads} torch threads, {where}")
    print(f"load average (1, 5, 15 min): {load_before} before, {load()} after")
    print(
        f"model: {Path(args.recipe).name} ESPnet keys, {params / 1e6:.2f} M parameters; "
        f"overrides {overrides or '-'}; "
        f"{recipe.batching.num_workers} DataLoader worker(s) in both trainers"
    )
    print(f"optimizer: {optimizer_implementations(recipe, dev)}")
    print(
        f"batches: asrflow Lhotse max_duration {recipe.batching.max_duration:g} s, "
        f"{recipe.batching.num_buckets} buckets: {target:.2f} audio s/batch over an epoch "
        f"({asrflow_per_epoch} batches); ESPnet2 {args.batch_type} {size_name} {size}: "
        f"{espnet_audio:.2f} s/batch ({espnet_per_epoch} batches)"
    )
    if written:
        print(f"({written} cuts that are not whole audio files were written as WAV for ESPnet2)")
    print(
        f"{args.rounds} round(s) interleaved, each loop {args.steps} timed steps after "
        f"{args.warmup}; s/step: median of the step-to-step wall clock (forward start to forward "
        "start) over all rounds; audio s/s: all timed steps' audio / their seconds; per audio s: "
        "their seconds / their audio (in brackets: median s/step / mean audio per step); start "
        "s: seconds from launch to the first step"
    )
    print()
    print_table([rows[label] for label in labels[:4]], espnet)
    print()
    print_device(
        [rows[label] for label in labels[:4]], model_flops, peak, args.peak_tflops is not None
    )
    print_ratios(espnet, asrflow, bare_a, bare_e)
    if args.breakdown:
        print()
        pre, plain, prof = (rows[v.label] for v in (PRELOADED, NO_EXTRAS, PROFILED))
        print_breakdown(asrflow, pre, plain, bare_a, prof, loading)
    write_json(args, recipe, overrides, target, [espnet, asrflow, bare_a, bare_e], load_before)


def optimizer_implementations(recipe: Recipe, device: str) -> str:
    """How each loop's optimizer computes its update: asrflow's and the bare loop's as the
    recipe's ``optim.implementation`` resolves on ``device``, ESPnet2's PyTorch's default (its
    ``optim_conf`` has no such key here)."""
    from asrflow.train.loop.schedule import implementation_kwargs

    how = implementation_kwargs(recipe.optim.implementation, [torch.zeros(1, device=device)])
    ours = "fused" if how.get("fused") else "foreach" if how.get("foreach") else "for_loop"
    if not how:
        ours = "PyTorch's default"
    default = "foreach" if device == "cuda" else "for_loop"
    return (
        f"{recipe.optim.name} {ours} in asrflow and the bare loop (optim.implementation "
        f"{recipe.optim.implementation}), ESPnet2's PyTorch's default ({default})"
    )


def write_json(
    args: argparse.Namespace,
    recipe: Recipe,
    overrides: dict[str, Any],
    batch_audio: float,
    loops: list[Row],
    load_before: str,
) -> None:
    """``results/bench/espnet_speed.json``: :func:`figures_rows` with the machine, date, commit
    and load (the 1-minute load average before the run) in every row."""
    from figures import figures_json, settings_of, stamp_rows, write_figures  # bench/

    b = recipe.batching
    where = "bf16 on the GPU" if args.device == "cuda" else "fp32"
    options = " ".join(f"--set {o}" for o in args.set)
    batches = (
        "length-sorted batches" if b.sampler == "sorted" else f"{b.num_buckets} duration buckets"
    )
    what = (
        f"training, {Path(args.recipe).stem} ({b.num_workers} loader worker(s) in each trainer, "
        f"{batches}), {where}, {args.threads} threads, batches of "
        f"{batch_audio:.2f} s of audio (`espnet_speed.py{' --breakdown' if args.breakdown else ''}"
        f"{' ' + options if options else ''}`, {args.rounds} interleaved rounds of {args.steps} "
        f"steps after {args.warmup}); optimizer "
        f"{optimizer_implementations(recipe, 'cuda' if args.device == 'cuda' else 'cpu')}"
    )
    data = figures_json(
        PERFORMANCE_COLUMNS, figures_rows(*loops, what), load_before=load_before,
        notes=[f"{versions()}; overrides {overrides or '-'}."], settings=settings_of(args),
    )  # fmt: skip
    stamp_rows(data)
    for row in data["rows"]:
        row["load"] = load_before.split()[0]  # the docs table's load: the 1-min one, before
    write_figures("espnet_speed", data)


if __name__ == "__main__":
    main()
