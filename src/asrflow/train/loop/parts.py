"""What a run's Trainer is given: model, Lightning module, loaders, callbacks and loggers.

:func:`build_trainer_parts` builds them for one rank from the run's spec and recipe (no training
yet); :mod:`asrflow.train.run.runner` hands the parts to ``lightning.Trainer``. The train cuts
themselves (what the batch audit samples too) come from :mod:`asrflow.train.batches.loader`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lhotse.dataset import SimpleCutSampler

from asrflow.artifacts import CHECKPOINTS, checkpoint_pattern
from asrflow.artifacts import LAST_CHECKPOINT as LAST
from asrflow.data.cuts import load_cuts, text
from asrflow.export.find import model_sample_rate
from asrflow.recipe.sections import Recipe, warmup_steps
from asrflow.text import TextNormalization, normalize
from asrflow.tokens import TokenEncoder
from asrflow.train.batches.loader import (
    AsrDataset,
    EpochMixSampler,
    batch_loader,
    epoch_train_cuts,
    make_sampler,
    train_corpora,
)
from asrflow.train.batches.shard_stream import ShardBatches, ShardLoader, run_shards
from asrflow.train.batches.vtlp import add_vtlp
from asrflow.train.init.weights import apply_init
from asrflow.train.loop.diagnostics import Diagnostics, DiagnosticsCallback
from asrflow.train.loop.loggers import MetricsRow, RowTensorBoardLogger
from asrflow.train.loop.model import build_model
from asrflow.train.loop.module import AsrModule
from asrflow.train.loop.resume import (
    AtomicModelCheckpoint,
    ExactResume,
    LastCheckpoint,
    ResumableCSVLogger,
    SkippingSampler,
)
from asrflow.train.spec import RunSpec


def build_trainer_parts(
    spec: RunSpec, work: Path, *, world_size: int = 1, rank: int = 0
) -> dict[str, Any]:
    """Model, module, data loaders, callbacks and loggers for a run (no training yet).

    ``callbacks``: the metrics row, the diagnostics and exact resume (one callback per concern,
    :mod:`asrflow.train.loop.module`), then the checkpoints. The train and dev samplers are sharded
    for ``rank`` of ``world_size`` processes (the Trainer's ``use_distributed_sampler`` is off:
    Lhotse's samplers shard by batch)."""
    recipe = spec.recipe
    L.seed_everything(recipe.trainer.seed, workers=True)
    if recipe.trainer.allow_tf32 and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    norm = TextNormalization.from_dict(spec.normalization)
    encoder = TokenEncoder(spec.bpe_model, spec.tokens, norm)
    model, args = build_model(recipe.model, spec.tokens, spec.bpe_model)
    init = None
    if spec.init:
        overridden = (spec.architecture or {}).get("overridden", ())
        init = apply_init(model, spec.init, tokens=spec.tokens, overridden=overridden)

    if recipe.augmentation.vtlp:
        add_vtlp(model, recipe.augmentation.vtlp)
    rate = model_sample_rate(args.frontend_conf)
    noise = tuple(recipe.augmentation.noise_snr) or None
    datasets = {"train": AsrDataset(encoder, rate, noise), "dev": AsrDataset(encoder, rate)}
    loaders = _loaders(spec, datasets, world_size=world_size, rank=rank)
    dev = loaders["dev_cuts"]
    references = {c.id: normalize(text(c), norm) for c in dev}
    diagnostics = _diagnostics(recipe, work, sorted(references), write_spikes=rank == 0)
    train_sampler = loaders["train"].sampler
    module = AsrModule(model, recipe, encoder, references, train_sampler)
    metrics_row = MetricsRow()
    return {
        "module": module,
        "args": args,
        "train_loader": loaders["train"],
        "dev_loader": loaders["dev"],
        # one callback per concern; Lightning runs the checkpoint callbacks last
        "callbacks": [
            metrics_row,
            DiagnosticsCallback(diagnostics),
            ExactResume(train_sampler),
            *_checkpoint_callbacks(recipe, work),
        ],
        "metrics_row": metrics_row,
        "loggers": _loggers(work),
        "diagnostics": diagnostics,
        "num_train_cuts": loaders["num_train_cuts"],
        "num_dev_cuts": len(dev),
        "init": init,
    }


def _loaders(
    spec: RunSpec, datasets: Mapping[str, Any], *, world_size: int, rank: int
) -> dict[str, Any]:
    """Train and dev loaders of this rank (``datasets``: the train and dev
    :class:`~asrflow.train.batches.loader.AsrDataset`); the train sampler can skip the batches a
    resumed run already saw (:class:`~asrflow.train.loop.resume.SkippingSampler`, or the
    :class:`~asrflow.train.batches.shard_stream.ShardLoader` of a sharded run, which is its own
    sampler)."""
    recipe, sets = spec.recipe, train_corpora(spec)
    if spec.train_shards:
        train = epoch_train_cuts(spec, sets, 0)
        train_loader: Any = _shard_loader(spec, datasets["train"], train, world_size, rank)
    else:
        if len(sets) > 1 and spec.train_weights is not None:  # a new weighted mix every epoch
            epoch_cuts = functools.partial(epoch_train_cuts, spec, sets)
            sampler = EpochMixSampler(epoch_cuts, recipe.batching, world_size=world_size, rank=rank)
            train = sampler.cuts
        else:
            train = epoch_train_cuts(spec, sets, 0)
            sampler = make_sampler(train, recipe.batching, world_size=world_size, rank=rank)
        workers, nice = recipe.batching.num_workers, recipe.batching.worker_nice
        skipping = SkippingSampler(sampler)
        train_loader = batch_loader(datasets["train"], skipping, workers, worker_nice=nice)
    dev = load_cuts(spec.dev_cuts)
    if spec.max_dev_cuts is not None:
        dev = dev.subset(first=min(spec.max_dev_cuts, len(dev)))
    dev_sampler = SimpleCutSampler(
        dev,
        max_duration=recipe.batching.max_duration,
        shuffle=False,
        world_size=world_size,
        rank=rank,
    )
    return {
        "train": train_loader,
        "dev": batch_loader(datasets["dev"], dev_sampler, 0),
        "num_train_cuts": len(train),
        "dev_cuts": dev,
    }


def _shard_loader(spec: RunSpec, dataset: Any, train: Any, world_size: int, rank: int) -> Any:
    """The train loader of a run whose corpora are sharded
    (:mod:`asrflow.train.batches.shard_stream`);
    ``train``: the first epoch's cuts as metadata, for the bucket edges."""
    recipe, (corpora, weights) = spec.recipe, run_shards(spec)
    bins = make_sampler(train, recipe.batching, world_size=1, rank=0).duration_bins
    batches = ShardBatches(
        corpora,
        dataset,
        recipe.batching,
        bins,
        world_size=world_size,
        rank=rank,
        speed_perturb=recipe.augmentation.speed_perturb,
        max_cuts=spec.max_train_cuts,
        weights=weights,
    )
    b = recipe.batching
    return ShardLoader(batches, num_workers=b.num_workers, worker_nice=b.worker_nice)


def _diagnostics(recipe: Recipe, work: Path, dev_ids: Sequence[str], write_spikes: bool) -> Any:
    settings = recipe.diagnostics
    return Diagnostics(
        work / "diagnostics",
        list(dev_ids)[: settings.num_decode_utterances],
        spike_factor=settings.spike_factor,
        spike_window=settings.spike_window,
        spike_z=settings.spike_z,
        spike_min_excess=settings.spike_min_excess,
        speed_factors=recipe.augmentation.speed_perturb,
        warmup_steps=warmup_steps(recipe.scheduler, recipe.trainer.max_steps),
        blank_warning=settings.blank_warning_after_warmup,
        write_spikes=write_spikes,  # rank 0 judges spikes (asrflow.train.loop.diagnostics)
    )


def _checkpoint_callbacks(recipe: Recipe, work: Path) -> list[Any]:
    """Top-k checkpoints per criterion, then ``last.ckpt`` (the module logs the learning rate)."""
    ckpt_dir = work / CHECKPOINTS
    callbacks: list[Any] = [
        AtomicModelCheckpoint(
            dirpath=ckpt_dir,
            monitor=c.monitor,
            mode=c.mode,
            save_top_k=c.top_k,
            filename=checkpoint_pattern(c.monitor),
            auto_insert_metric_name=False,
        )
        for c in recipe.criteria
    ]
    callbacks.append(LastCheckpoint(ckpt_dir / LAST))  # after the top-k callbacks: see its doc
    return callbacks


def _loggers(work: Path) -> list[Any]:
    resuming = (work / CHECKPOINTS / LAST).is_file()
    return [
        ResumableCSVLogger(work, name="csv", version="", resuming=resuming),
        RowTensorBoardLogger(work, name="tensorboard", version=""),
    ]
