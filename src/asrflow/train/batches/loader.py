"""Training batches from Lhotse cuts: bucketing sampler, map-style dataset, DataLoader, mixing.

The sampler (:class:`lhotse.dataset.DynamicBucketingSampler`) groups cuts of similar duration
into batches of at most ``max_duration`` seconds and yields each batch as a ``CutSet``; the
:class:`AsrDataset` turns one such ``CutSet`` into padded tensors, loading and resampling the
audio on the fly. The DataLoader runs with ``batch_size=None`` and the sampler as its
``sampler``, so the sampler stays in the main process (its ``state_dict`` is the resume point)
and workers only load audio. Workers start from a fork server
(:func:`asrflow.train.batches.workers.worker_loader`), not as forks of the training process.

Example::

    enc = TokenEncoder("bpe.model", "tokens.txt", norm)
    batching = Batching(max_duration=200)
    dl = make_dataloader(load_cuts("train.jsonl.gz"), enc, batching, num_workers=4)
    for batch in dl:
        batch["speech"], batch["speech_lengths"], batch["text"], batch["text_lengths"]
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from lhotse import CutSet
from lhotse.dataset import DynamicBucketingSampler
from lhotse.dataset.collation import collate_vectors, read_audio_from_cuts
from torch.utils.data import DataLoader

from asrflow.data.cuts import load_cuts, origin, text
from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.tokens import TokenEncoder
from asrflow.train.batches.sorted_batches import SortedBatchSampler
from asrflow.train.batches.workers import worker_loader
from asrflow.train.spec import RunSpec
from asrflow.types import Hz

log = logging.getLogger(__name__)

EAGER_WARNING = "You are using DynamicBucketingSampler with an eagerly read CutSet"


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


class AsrDataset(torch.utils.data.Dataset):
    """Map-style dataset whose index is a whole batch: a ``CutSet`` from a Lhotse sampler.

    ``dataset[cuts]`` returns:

    - ``speech``: float32 ``(B, T)``, zero-padded, at ``sample_rate``;
    - ``speech_lengths``: int64 ``(B,)`` samples per cut;
    - ``text``: int64 ``(B, L)`` token IDs padded with ``-1`` (ESPnet's ignore ID);
    - ``text_lengths``: int64 ``(B,)``;
    - ``ids``: cut IDs in batch order;
    - ``num_tokens`` (int), ``audio_seconds`` (float, summed cut durations) and
      ``padding_ratio`` (float, padded samples over all samples of ``speech``).

    A cut whose transcript encodes to no token raises :class:`AsrflowError` naming its manifest
    line: CTC on an empty target is meaningless and poisons the loss. Audio with a NaN or
    infinite sample (a float WAV written from a broken pipeline) raises :class:`NonFiniteAudio`
    naming the cut and its file (:func:`check_finite`): it would make the loss of every batch it
    lands in NaN, and the training would skip those batches in silence.

    ``noise_snr``: ``(low, high)`` dB, white noise added to every cut at an SNR drawn from that
    range (:func:`add_noise`; the train set's dataset only), or ``None``.
    """

    def __init__(
        self,
        encoder: TokenEncoder,
        sample_rate: Hz = 16000,
        noise_snr: tuple[float, float] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(sample_rate, int) or sample_rate <= 0:
            raise AsrflowError(f"sample_rate must be a positive integer, got {sample_rate!r}")
        self.encoder = encoder
        self.sample_rate = sample_rate
        self.noise_snr = noise_snr

    def __getitem__(self, cuts: CutSet) -> dict[str, Any]:
        cuts = list(cuts)
        if not cuts:
            raise ValueError("AsrDataset got an empty batch of cuts")
        targets = [encode_cut(self.encoder, cut) for cut in cuts]

        sr = self.sample_rate
        speech, speech_lengths = collate_speech(
            [c if c.sampling_rate == sr else c.resample(sr) for c in cuts]
        )
        check_finite(speech, cuts, sr)
        if self.noise_snr is not None:
            speech = add_noise(speech, speech_lengths, self.noise_snr)

        text_lengths = torch.tensor([len(t) for t in targets], dtype=torch.int64)
        tokens = torch.full(
            (len(targets), int(text_lengths.max())), self.encoder.ignore_id, dtype=torch.int64
        )
        for i, t in enumerate(targets):
            tokens[i, : len(t)] = torch.tensor(t, dtype=torch.int64)

        total = speech.shape[0] * speech.shape[1]
        padding = 1.0 - float(speech_lengths.sum()) / total if total else 0.0
        return {
            "speech": speech,
            "speech_lengths": speech_lengths,
            "text": tokens,
            "text_lengths": text_lengths,
            "ids": [c.id for c in cuts],
            "num_tokens": int(text_lengths.sum()),
            "audio_seconds": float(sum(c.duration for c in cuts)),
            "padding_ratio": padding,
        }


def add_noise(
    speech: torch.Tensor,
    lengths: torch.Tensor,
    snr_db: tuple[float, float],
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``speech`` (``(B, T)``, row ``i`` valid for ``lengths[i]`` samples) plus white Gaussian
    noise, each row at its own SNR drawn uniformly from ``snr_db`` (dB, over the row's valid
    samples); padding stays zero, and a silent row stays silent.

    ESPnet's preprocessor mixes recorded noise (``--noise_scp``, ``noise_db_range``) the same
    way, one SNR per utterance; white noise needs no noise corpus. It raises every cut's noise
    floor to a level the model cannot use to tell speakers or recording sessions apart."""
    low, high = snr_db
    n, t = speech.shape
    valid = torch.arange(t)[None, :] < lengths[:, None]
    power = (speech.square() * valid).sum(dim=1) / lengths.clamp(min=1)
    snr = low + (high - low) * torch.rand(n, generator=generator)
    scale = (power / 10 ** (snr / 10)).sqrt()
    noise = torch.randn(n, t, generator=generator) * scale[:, None] * valid
    return speech + noise.to(speech.dtype)


def collate_speech(cuts: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The cuts' audio as float32 ``(B, T)``, zero-padded on the right, and int64 ``(B,)``
    sample counts; a multichannel cut is downmixed to mono by averaging its channels.

    The same tensors as Lhotse's ``collate_audio(cuts, mono_downmix=True)`` (tested), read
    with Lhotse's ``read_audio_from_cuts`` and padded with ``collate_vectors``: ``collate_audio``
    first pads every cut to the longest as a ``MixedCut`` with a padding track and reads the
    padded cuts through the mixer: 3.0 ms a demo batch against 2.2 ms this way (60 demo batches
    of ~19 s, one thread, medians).
    """
    audios, _ = read_audio_from_cuts(cuts)
    audios = [a.mean(dim=0) if a.dim() == 2 else a for a in audios]  # (channels, time)
    lengths = torch.tensor([a.shape[0] for a in audios], dtype=torch.int64)
    return collate_vectors(audios, padding_value=0.0).to(torch.float32), lengths


class NonFiniteAudio(AsrflowError):
    """A cut's audio holds NaN or infinite samples."""


def _audio_file(cut: Any) -> str:
    recording = getattr(cut, "recording", None)
    sources = getattr(recording, "sources", None) or []
    return str(sources[0].source) if sources else f"(cut {cut.id}: no audio file)"


def check_finite(speech: torch.Tensor, cuts: Sequence[Any], sample_rate: Hz) -> None:
    """Raise :class:`NonFiniteAudio` unless every sample of ``speech`` (row ``i``: ``cuts[i]``,
    at ``sample_rate``) is finite; the message names each bad cut (a few), its audio file and
    manifest line."""
    # one sum first, ~20x faster than testing every sample (20 s at 16 kHz, one thread: 0.05 ms
    # against 1.06): a NaN or inf sample makes the sum NaN or inf, so a finite sum means every
    # sample is; finite samples whose sum overflows get the exact test below
    if bool(torch.isfinite(speech.sum())):
        return
    finite = torch.isfinite(speech)
    if bool(finite.all()):
        return
    bad = [i for i in range(speech.shape[0]) if not bool(finite[i].all())]
    described = []
    for i in bad[:3]:
        cut = cuts[i]
        n = int((~finite[i]).sum())
        seconds = int((~finite[i]).nonzero()[0, 0]) / sample_rate
        described.append(
            f"{_audio_file(cut)}: cut {cut.id} ({origin(cut)}) has {n} NaN/inf sample(s), the "
            f"first at {seconds:.3f} s of the cut"
        )
    more = f" (and {len(bad) - 3} more cut(s) of this batch)" if len(bad) > 3 else ""
    raise NonFiniteAudio(
        "; ".join(described) + f"{more}. A NaN or infinite sample makes the loss of every "
        "batch it is in NaN: replace the audio file with a clean one or remove the utterance "
        "from the manifest, then rerun (with the corpus's validation.full_decode: true, "
        "validation decodes all its audio and lists every such file at once)"
    )


def encode_cut(encoder: TokenEncoder, cut: Any) -> list[int]:
    """Token IDs of a cut's transcript; :class:`AsrflowError` (naming its origin) when empty."""
    ids = encoder.encode(text(cut))
    if not ids:
        raise AsrflowError(
            f"{origin(cut)}: cut {cut.id} has no tokens after text normalization "
            f"(transcript {text(cut)!r}); an empty CTC target poisons training: fix the "
            "transcript or remove the cut (the data filter drops empty_after_normalization)"
        )
    return ids


def make_sampler(
    cuts: CutSet,
    batching: Batching,
    world_size: int | None = None,
    rank: int | None = None,
) -> DynamicBucketingSampler | SortedBatchSampler:
    """A resumable :class:`DynamicBucketingSampler` over ``cuts`` with the run's settings
    (with ``batching.sampler: sorted``, a :class:`SortedBatchSampler`).

    ``world_size``/``rank`` default to the ``torch.distributed`` setup (1/0 without it). Call
    ``sampler.set_epoch(e)`` before each epoch for a new shuffle (Lightning does it for the
    DataLoader's sampler); ``state_dict()``/``load_state_dict()`` resume mid-epoch.
    """
    if batching.sampler == "sorted":
        return SortedBatchSampler(cuts, batching, world_size=world_size, rank=rank)
    with warnings.catch_warnings():
        # asrflow's manifests are small enough to hold in memory; the warning is noise here.
        warnings.filterwarnings("ignore", message=EAGER_WARNING)
        try:
            return DynamicBucketingSampler(
                cuts, **batching.sampler_kwargs(), world_size=world_size, rank=rank
            )
        except AssertionError as exc:
            if "number of buckets" in str(exc):
                raise AsrflowError(
                    f"batching.num_buckets = {batching.num_buckets} is more than the number of "
                    f"train cuts; lower batching.num_buckets ({exc})"
                ) from exc
            raise


def make_dataloader(
    cuts: CutSet,
    encoder: TokenEncoder,
    batching: Batching,
    sample_rate: Hz = 16000,
    num_workers: int = 0,
    *,
    world_size: int | None = None,
    rank: int | None = None,
    pin_memory: bool = False,
    worker_nice: int = 0,
) -> DataLoader:
    """A DataLoader of :class:`AsrDataset` batches drawn by :func:`make_sampler`.

    The sampler is ``loader.sampler``. Workers (``num_workers > 0``) are kept alive across
    epochs. With Lightning, pass ``use_distributed_sampler=False`` to the Trainer: the sampler
    already splits batches across ranks.
    """
    if not isinstance(num_workers, int) or num_workers < 0:
        raise AsrflowError(f"num_workers must be a non-negative integer, got {num_workers!r}")
    sampler = make_sampler(cuts, batching, world_size=world_size, rank=rank)
    dataset = AsrDataset(encoder, sample_rate=sample_rate)
    return batch_loader(
        dataset, sampler, num_workers, pin_memory=pin_memory, worker_nice=worker_nice
    )


def batch_loader(
    dataset: AsrDataset,
    sampler: Any,
    num_workers: int = 0,
    *,
    pin_memory: bool = False,
    worker_nice: int = 0,
) -> DataLoader:
    """The DataLoader of every asrflow loader: ``sampler`` yields whole batches (CutSets) that
    ``dataset`` turns into tensors; workers (``num_workers > 0``, at ``worker_nice``) live
    across epochs."""
    return worker_loader(
        dataset,
        num_workers,
        sampler=sampler,
        persistent_workers=num_workers > 0,
        pin_memory=pin_memory,
        worker_nice=worker_nice,
    )


def mix_epoch(
    cutsets: Sequence[CutSet], weights: Sequence[float] | None, epoch: int, seed: int = 0
) -> CutSet:
    """Epoch ``epoch`` of several train corpora mixed by ``weights`` (eager, unshuffled).

    ``weights=None``: every cut of every corpus once (plain concatenation; each corpus weighs
    by its size). Otherwise an epoch holds as many cuts as all corpora together, ``N``, and
    corpus ``i`` gives ``round(N * w_i / sum(w))`` of them (at least one): a small corpus
    weighted up repeats within the epoch, a large one weighted down gives a different part of
    itself each epoch. Each corpus is read as an endless stream of passes, every pass a new
    permutation (seeded by ``seed``, the corpus index and the pass), and epoch ``e`` takes the
    next slice of that stream, so over ``ceil(size / share)`` epochs every cut is seen. A cut
    whose ID occurs again in the epoch (a repeat, or the same ID in another corpus) gets
    ``_rep<k>`` appended to it, so IDs stay unique.

    Unlike Lhotse's ``CutSet.mux`` read into a shuffling sampler (whose epochs hold every cut
    once, whatever the weights), the proportions hold exactly in every epoch; unlike
    ``infinite_mux`` epochs stay finite, so the batch audit, the epoch count and an exact
    mid-epoch resume (a pure function of ``epoch``) keep working.
    """
    if not cutsets:
        raise AsrflowError("mix: no corpora to mix")
    if weights is None:
        return _unique_ids(c for cuts in cutsets for c in cuts)
    if len(cutsets) != len(weights):
        raise AsrflowError(
            f"mix: {len(cutsets)} corpora but {len(weights)} weights; give one weight per corpus"
        )
    for i, w in enumerate(weights):
        if not _positive(w):
            raise AsrflowError(f"mix: weight {i} must be a positive number, got {w!r}")
    for i, cuts in enumerate(cutsets):
        if len(cuts) == 0:
            raise AsrflowError(f"mix: corpus {i} has no train cuts; remove it or its weight")
    total, wsum = sum(len(c) for c in cutsets), float(sum(weights))
    picked: list[Any] = []
    for i, (cuts, w) in enumerate(zip(cutsets, weights, strict=True)):
        items = list(cuts)
        share = max(1, round(total * float(w) / wsum))
        orders: dict[int, list[int]] = {}  # the passes this epoch's slice reads
        for k in range(epoch * share, (epoch + 1) * share):
            npass, pos = divmod(k, len(items))
            if npass not in orders:
                orders[npass] = pass_order(len(items), seed, i, npass)
            picked.append(items[orders[npass][pos]])
    return _unique_ids(picked)


def _unique_ids(cuts: Any) -> CutSet:
    """``cuts`` as a CutSet, the second, third... occurrence of an ID renamed ``<id>_rep<k>``."""
    seen: dict[str, int] = {}
    out = []
    for cut in cuts:
        repeat = seen.get(cut.id, 0)
        seen[cut.id] = repeat + 1
        out.append(cut if repeat == 0 else cut.with_id(f"{cut.id}_rep{repeat}"))
    return CutSet.from_cuts(out)


def pass_order(n: int, seed: int, corpus: int, npass: int) -> list[int]:
    """The permutation of ``range(n)`` for pass ``npass`` over corpus ``corpus``."""
    mixed_seed = ((seed * 1_000_003 + corpus) * 1_000_003 + npass) % 2**63
    return torch.randperm(n, generator=torch.Generator().manual_seed(mixed_seed)).tolist()


class EpochMixSampler:
    """A :func:`make_sampler` over a new :func:`mix_epoch` of the train corpora each epoch.

    ``epoch_cuts(e)`` gives epoch ``e``'s cuts (the mix, then speed perturbation); the bucketing
    sampler is rebuilt when ``set_epoch`` moves to another epoch, so every epoch keeps the
    weights' proportions and a resume rebuilds the same epoch. Iterating it iterates the current
    epoch's sampler (wrap it in :class:`~asrflow.train.loop.resume.SkippingSampler` as any other).
    """

    def __init__(
        self,
        epoch_cuts: Any,
        batching: Batching,
        world_size: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.epoch_cuts = epoch_cuts
        self.batching = batching
        self.epoch = 0
        self.cuts = epoch_cuts(0)
        """The current epoch's cuts."""
        self.sampler = make_sampler(self.cuts, batching, world_size, rank)
        self.world_size, self.rank = self.sampler.world_size, self.sampler.rank

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.cuts = self.epoch_cuts(epoch)
            self.sampler = make_sampler(self.cuts, self.batching, self.world_size, self.rank)
            self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Any:
        return iter(self.sampler)


def speed_perturb(cuts: CutSet, factors: Sequence[float]) -> CutSet:
    """``cuts`` once per speed factor (``1.0``: the cuts themselves), in the order given.

    Lhotse's :meth:`CutSet.perturb_speed` is lazy: audio is resampled when a batch loads it.
    A perturbed copy's IDs end in ``_sp<factor>`` (so every ID stays unique) and its
    durations are divided by the factor; transcripts and custom fields are kept. No factors:
    ``cuts`` unchanged.
    """
    if not factors:
        return cuts
    if len(set(factors)) != len(factors):
        raise AsrflowError(f"speed_perturb: factors {list(factors)} repeat one; give each once")
    copies = [cuts if f == 1.0 else cuts.perturb_speed(f, affix_id=True) for f in factors]
    return CutSet.from_cuts(cut for copy in copies for cut in copy)


# --- a run's train cuts ------------------------------------------------------------------


def train_corpora(spec: RunSpec) -> list[Any]:
    """The run's train CutSets, one per corpus (eager; ``max_train_cuts`` applied)."""
    sets = [load_cuts(p) for p in spec.train_cuts]
    if spec.max_train_cuts is not None:
        sets = [s.subset(first=min(spec.max_train_cuts, len(s))) for s in sets]
    return [s.to_eager() for s in sets]


def epoch_train_cuts(spec: RunSpec, sets: Sequence[Any], epoch: int) -> Any:
    """Epoch ``epoch``'s train cuts as the run's sampler sees them: the corpora mixed by
    ``weights``, then speed-perturbed."""
    recipe = spec.recipe
    if len(sets) == 1:
        cuts = sets[0]
    else:
        cuts = mix_epoch(sets, spec.train_weights, epoch, seed=recipe.batching.seed)
    return speed_perturb(cuts, recipe.augmentation.speed_perturb)


def load_train_cuts(spec: RunSpec) -> Any:
    """The first epoch's train cuts (what the batch audit samples)."""
    return epoch_train_cuts(spec, train_corpora(spec), 0)
