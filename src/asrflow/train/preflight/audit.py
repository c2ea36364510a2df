"""Batch audit before training: what the configured sampler will feed the model.

The audit runs the run's :class:`~lhotse.dataset.DynamicBucketingSampler` over the train cuts
without loading any audio (durations come from the manifest, token counts from encoding each
transcript once) and reports, per batch: tokens, utterances, audio seconds and padding ratio
(``1 - sum(durations) / (max duration * n)``), each as min, p5, median, p95, max, mean and
coefficient of variation (population std / mean); and ``padding_share``, the padding of all
batches together (``1 - audio seconds / padded seconds``, summed over the batches): what the
model's forward spends on padding, which a batch-wise median hides (a few long, badly mixed
batches pad the most). ``batching.num_buckets`` trades it against shuffling: on the demo corpus
(first three epochs) 12.0 % at 10 buckets, 6.6 % at 20, 3.3 % at 30 (``bench/padding_sweep.py``
prints it by bucket count from :func:`sampled_batches`).

Why tokens per batch matter: a loss summed over tokens, or averaged over utterances, gives a
gradient that grows with the number of tokens in the batch. Duration-bucketed batches can vary
a lot in token count, so the effective learning rate varies with them; normalizing the loss by
tokens removes that. The audit warns when the spread is large (CV > 0.5) and the loss is not
token-normalized.

Outputs (all atomic): a JSON report, a two-panel histogram PNG and a readable text summary.
:func:`audit_run` is rule ``audit_batches``'s entry; the job imports neither Lightning nor ESPnet
(import-linter's contract in ``pyproject.toml``), so it starts in about a third of the smoke
run's import time.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from lhotse.cut import Cut

from asrflow.data.cuts import load_cuts, origin, save_cuts, text
from asrflow.errors import AsrflowError
from asrflow.io import write_bytes, write_json, write_text
from asrflow.recipe.batching import Batching
from asrflow.text import TextNormalization
from asrflow.tokens import TokenEncoder
from asrflow.train.batches.loader import load_train_cuts, make_sampler
from asrflow.train.batches.shard_stream import ShardBatches, run_shards
from asrflow.train.preflight.unk import UnkCount, unk_warnings
from asrflow.train.spec import RunSpec
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

CV_WARN = 0.5
"""Tokens-per-batch coefficient of variation above which a non-token loss normalization warns."""

MAX_LISTED = 20


@dataclass(frozen=True)
class BatchStats:
    """What one batch holds, computed from the manifest alone."""

    tokens: int
    utterances: int
    audio_seconds: float
    padded_seconds: float
    """Seconds the batch holds padded to its longest cut (longest x utterances)."""

    @property
    def padding_ratio(self) -> float:
        """``1 - audio seconds / padded seconds``: the share of the padded batch that is padding."""
        return 1.0 - self.audio_seconds / self.padded_seconds if self.padded_seconds > 0 else 0.0


def describe(values: Sequence[float]) -> dict[str, float]:
    """min, p5, median, p95, max, mean and ``cv`` (population std / mean; 0 when mean is 0).

    >>> describe([1, 3])["cv"]
    0.5
    """
    if len(values) == 0:
        raise ValueError("describe() needs at least one value")
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    p5, median, p95 = (float(v) for v in np.percentile(x, [5, 50, 95]))
    return {
        "min": float(x.min()),
        "p5": p5,
        "median": median,
        "p95": p95,
        "max": float(x.max()),
        "mean": mean,
        "cv": float(x.std()) / mean if mean else 0.0,
    }


def token_counts(
    cuts: Sequence[Cut], encoder: TokenEncoder, unk: UnkCount | None = None
) -> dict[str, int]:
    """Tokens per cut ID; raises (listing the manifest lines) when any cut has no token.
    ``unk``: also counts the ``<unk>`` targets there (the same encoding of each transcript)."""
    counts: dict[str, int] = {}
    empty: list[str] = []
    for cut in cuts:
        ids = encoder.encode(text(cut))
        if unk is not None:
            unk.add(encoder, text(cut), ids)
        n = len(ids)
        if n == 0:
            empty.append(f"{origin(cut)}: cut {cut.id} (transcript {text(cut)!r})")
        counts[cut.id] = n
    if empty:
        listed = "\n  ".join(empty[:MAX_LISTED])
        more = f"\n  ... and {len(empty) - MAX_LISTED} more" if len(empty) > MAX_LISTED else ""
        raise AsrflowError(
            f"{len(empty)} train cut(s) have no tokens after text normalization; an empty CTC "
            f"target poisons training. Fix the transcripts or filter them out:\n  {listed}{more}"
        )
    return counts


class _RepeatedIds(dict):
    """Token counts that also answer for a repeated shard's cut IDs (``<id>_rep<k>``,
    :func:`asrflow.train.batches.shard_stream.mix_shards`): as many tokens as the cut repeated."""

    def __missing__(self, key: str) -> int:
        base = re.sub(r"_rep\d+", "", key)
        if base == key:
            raise KeyError(key)
        return self[base]


def batch_stats(batch: Sequence[Cut], tokens: Mapping[str, int]) -> BatchStats:
    """Tokens, utterances, audio seconds and padded seconds of one batch of cuts."""
    durations = [float(c.duration) for c in batch]
    return BatchStats(
        tokens=sum(tokens[c.id] for c in batch),
        utterances=len(durations),
        audio_seconds=sum(durations),
        padded_seconds=max(durations) * len(durations),
    )


def summarize(
    batches: Sequence[BatchStats], loss_normalization: str, epochs: int = 1
) -> dict[str, Any]:
    """Statistics of the batches and the warnings they call for."""
    if not batches:
        raise AsrflowError("the sampler produced no batches; is the train CutSet empty?")
    report: dict[str, Any] = {
        "epochs": epochs,
        "num_batches": len(batches),
        "num_utterances": sum(b.utterances for b in batches),
        "total_tokens": sum(b.tokens for b in batches),
        "total_audio_seconds": round(sum(b.audio_seconds for b in batches), 3),
        "loss_normalization": loss_normalization,
        "tokens_per_batch": describe([b.tokens for b in batches]),
        "utterances_per_batch": describe([b.utterances for b in batches]),
        "audio_seconds_per_batch": describe([b.audio_seconds for b in batches]),
        "padding_ratio": describe([b.padding_ratio for b in batches]),
        "padding_share": padding_share(batches),
    }
    report["warnings"] = _warnings(report)
    return report


def padding_share(batches: Sequence[BatchStats]) -> float:
    """The padding of all ``batches`` together: ``1 - audio seconds / padded seconds``.

    >>> padding_share([BatchStats(1, 1, 4.0, 4.0), BatchStats(2, 2, 3.0, 4.0)])
    0.125
    """
    padded = sum(b.padded_seconds for b in batches)
    return 1.0 - sum(b.audio_seconds for b in batches) / padded if padded > 0 else 0.0


def _warnings(report: Mapping[str, Any]) -> list[str]:
    cv = report["tokens_per_batch"]["cv"]
    mode = report["loss_normalization"]
    if cv <= CV_WARN or mode == "token":
        return []
    return [
        f"tokens per batch vary widely (CV = {cv:.2f} > {CV_WARN}) and loss.normalization is "
        f"{mode!r}: summed/utterance-normalized losses scale the gradient with tokens per "
        f"batch; with CV={cv:.2f} the effective learning rate swings by about {cv:.0%} "
        "(one standard deviation) from batch to batch; set loss.normalization: token"
    ]


def sampled_batches(
    cuts: Any,
    settings: Batching,
    tokens: Mapping[str, int],
    epochs: int,
    shard_batches: Callable[[int, list[float]], Iterable[Any]] | None = None,
) -> tuple[list[BatchStats], list[int], list[float]]:
    """The batches the train sampler makes of ``cuts`` over ``epochs`` epochs, without audio:
    their :class:`BatchStats`, the number per epoch and the sampler's estimated duration bins.
    One process, the whole stream: what every rank together sees in an epoch. ``tokens``: per
    cut ID (:func:`token_counts`); ``shard_batches`` as in :func:`audit_batches`."""
    sampler = make_sampler(cuts, settings, world_size=1, rank=0)
    batches: list[BatchStats] = []
    per_epoch: list[int] = []
    bins = [float(b) for b in sampler.duration_bins]
    if shard_batches is not None:
        tokens = _RepeatedIds(tokens)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        stream = sampler if shard_batches is None else shard_batches(epoch, bins)
        before = len(batches)
        batches.extend(batch_stats(list(batch), tokens) for batch in stream)
        per_epoch.append(len(batches) - before)
    return batches, per_epoch, bins


def audit_batches(
    cuts_path: Pathlike,
    bpe_model: Pathlike,
    tokens_txt: Pathlike,
    normalization: TextNormalization,
    batching: Batching,
    loss_normalization: str,
    out_json: Pathlike,
    out_png: Pathlike,
    out_txt: Pathlike,
    epochs: int = 1,
    shard_batches: Callable[[int, list[float]], Iterable[Any]] | None = None,
) -> dict[str, Any]:
    """Run the train sampler for ``epochs`` epochs without audio; write JSON, PNG and text.

    ``shard_batches(epoch, duration_bins)``: the batches of a sharded run
    (:meth:`asrflow.train.batches.shard_stream.ShardBatches.epoch_batches`), audited instead of the
    per-file sampler's; the bins are that sampler's, as in training.

    Returns the JSON report (see :func:`summarize`; plus ``unk_tokens``, the train targets
    that are ``<unk>``, over the cuts audited: a warning names them when any is, and the smoke
    run stops above ``diagnostics.max_unk_share``; ``num_cuts``, ``batches_per_epoch``,
    ``batching``, the sampler's estimated ``duration_bins`` and ``normalization_sha256``).
    Warnings are also logged at WARNING level.
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise AsrflowError(f"batch audit: epochs must be a positive integer, got {epochs!r}")
    encoder = TokenEncoder(bpe_model, tokens_txt, normalization)
    cuts = load_cuts(cuts_path)
    unk = UnkCount("train")
    tokens = token_counts(cuts, encoder, unk)
    if not tokens:
        raise AsrflowError(f"{cuts_path}: no train cuts to audit")

    batches, per_epoch, bins = sampled_batches(cuts, batching, tokens, epochs, shard_batches)
    report = summarize(batches, loss_normalization, epochs=epochs)
    # the smoke run stops above diagnostics.max_unk_share (train.preflight.unk); here, a warning
    report["unk_tokens"] = unk.to_dict()
    report["warnings"] += unk_warnings(unk, bpe_model)
    report["num_cuts"] = len(cuts)
    report["batches_per_epoch"] = per_epoch
    report["batching"] = batching.sampler_kwargs()
    if batching.sampler != Batching.sampler:  # the default's reports stay as they were
        report["batching"]["sampler"] = batching.sampler
    report["source"] = "files" if shard_batches is None else "shards"
    # Lhotse may estimate fewer bins than asked for on small or uniform data.
    report["duration_bins"] = [round(b, 3) for b in bins]
    report["normalization_sha256"] = normalization.sha256()

    for warning in report["warnings"]:
        log.warning("batch audit: %s", warning)
    t = report["tokens_per_batch"]
    log.info(
        "batch audit: %d batches over %d epoch(s); tokens/batch median %.0f (CV %.2f); "
        "median padding %.1f%%, %.1f%% of all padded audio",
        report["num_batches"],
        epochs,
        t["median"],
        t["cv"],
        100 * report["padding_ratio"]["median"],
        100 * report["padding_share"],
    )

    write_json(out_json, report)
    write_text(out_txt, format_summary(report))
    write_bytes(out_png, plot_png(batches, report))
    return report


_ROWS = (
    ("tokens per batch", "tokens_per_batch", "{:.0f}"),
    ("utterances per batch", "utterances_per_batch", "{:.1f}"),
    ("audio seconds per batch", "audio_seconds_per_batch", "{:.1f}"),
    ("padding ratio", "padding_ratio", "{:.3f}"),
)
_COLUMNS = ("min", "p5", "median", "p95", "max", "mean")


def format_summary(report: Mapping[str, Any]) -> str:
    """A readable text table of the report, warnings first."""
    lines = [f"WARNING: {w}" for w in report.get("warnings", [])]
    if lines:
        lines.append("")
    minutes = report["total_audio_seconds"] / 60
    lines.append(
        f"Batch audit: {report['num_batches']} batches over {report['epochs']} epoch(s), "
        f"{report.get('num_cuts', report['num_utterances'])} cuts, {minutes:.1f} min of audio, "
        f"{report['total_tokens']} tokens"
    )
    if "batching" in report:
        lines.append("sampler: " + ", ".join(f"{k}={v}" for k, v in report["batching"].items()))
    lines.append(f"loss normalization: {report['loss_normalization']}")
    if "unk_tokens" in report:
        unk = report["unk_tokens"]
        lines.append(f"<unk> targets: {unk['unk']} of {unk['tokens']} tokens")
    lines.append("")
    header = f"{'':<24}" + "".join(f"{c:>10}" for c in _COLUMNS) + f"{'cv':>8}"
    lines.append(header)
    for label, key, fmt in _ROWS:
        stats = report[key]
        cells = "".join(f"{fmt.format(stats[c]):>10}" for c in _COLUMNS)
        lines.append(f"{label:<24}{cells}{stats['cv']:>8.2f}")
    lines.append("")
    lines.append(
        f"padding, all batches together: {100 * report['padding_share']:.1f} % of the padded "
        "audio (what the forward spends on it; batching.num_buckets lowers it)"
    )
    return "\n".join(lines) + "\n"


def plot_png(batches: Sequence[BatchStats], report: Mapping[str, Any]) -> bytes:
    """Two histograms (tokens per batch, padding ratio) as PNG bytes, reproducibly."""
    # matplotlib only for the plot, not for the audit's figures
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    t = report["tokens_per_batch"]
    left.hist([b.tokens for b in batches], bins=min(40, max(5, len(batches) // 4)))
    left.axvline(t["median"], color="black", linestyle="--", linewidth=1)
    left.set_xlabel("tokens per batch")
    left.set_ylabel("batches")
    left.set_title(f"CV {t['cv']:.2f}", fontsize=10)
    p = report["padding_ratio"]
    right.hist([b.padding_ratio for b in batches], bins=20, range=(0.0, 1.0), color="tab:orange")
    right.axvline(p["median"], color="black", linestyle="--", linewidth=1)
    right.set_xlabel("padding ratio")
    right.set_title(f"median {p['median']:.1%}", fontsize=10)
    fig.suptitle(
        f"Batch audit: {report['num_batches']} batches, {report['epochs']} epoch(s), "
        f"loss normalization {report['loss_normalization']!r}",
        fontsize=11,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def audit_run(spec: RunSpec, out_json: Pathlike, out_png: Pathlike, out_txt: Pathlike) -> dict:
    """The batch audit of a run: its recipe's sampler over its train cuts, no model, no audio."""

    recipe = spec.recipe
    with tempfile.TemporaryDirectory(prefix="asrflow-audit-") as tmp:
        cuts_path = spec.train_cuts[0]
        if spec.train_shards and len(spec.train_cuts) > 1:  # every cut a shard mix can draw
            cuts_path = Path(tmp) / "train.jsonl.gz"
            unmixed = dataclasses.replace(spec, train_weights=None)
            save_cuts(load_train_cuts(unmixed), cuts_path)
        elif len(spec.train_cuts) > 1 or recipe.augmentation.speed_perturb:
            cuts_path = Path(tmp) / "train.jsonl.gz"
            save_cuts(load_train_cuts(spec), cuts_path)
        return audit_batches(
            cuts_path,
            spec.bpe_model,
            spec.tokens,
            TextNormalization.from_dict(spec.normalization),
            recipe.batching,
            recipe.loss.normalization,
            out_json,
            out_png,
            out_txt,
            shard_batches=_shard_batches(spec, recipe) if spec.train_shards else None,
        )


def _shard_batches(spec: RunSpec, recipe: Any) -> Any:
    """``shard_batches`` of the batch audit for a sharded run: one process reading every shard
    with the recipe's loader workers (the cut files only)."""
    corpora, weights = run_shards(spec)
    speed = recipe.augmentation.speed_perturb

    def epoch_batches(epoch: int, bins: list[float]) -> Any:
        batches = ShardBatches(
            corpora, None, recipe.batching, bins, speed_perturb=speed, weights=weights
        )
        batches.epoch = epoch
        return batches.epoch_batches(recipe.batching.num_workers)

    return epoch_batches
