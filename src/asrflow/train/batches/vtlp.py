"""Vocal tract length perturbation (VTLP) of the features, in training only.

Jaitly & Hinton (2013, "Vocal Tract Length Perturbation (VTLP) improves speech recognition")
warp the frequency axis of each training utterance by a random factor ``alpha`` (0.9-1.1), so
that a model trained on few speakers hears vocal tracts longer and shorter than theirs. The
warp is piecewise linear in Hz: ``f -> alpha * f`` up to a boundary, then a straight line to the
Nyquist frequency, which stays fixed. Here it is applied to the log-mel features a model's
frontend computes, by sampling each utterance's features at the warped centre frequencies of
the mel bins (linear interpolation between bins), between the frontend and SpecAugment.
Unlike speed perturbation it keeps the speaking rate, and it draws a new factor every time an
utterance is seen.

:func:`add_vtlp` puts it in front of an ESPnet model's ``specaug`` module, which the model
applies in training only. The module has no parameters or buffers, so checkpoints, averages
and the exported package (whose ``config.yaml`` names the recipe's own ``specaug``) do not
change: a plain ESPnet ``Speech2Text`` loads them.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from asrflow.errors import AsrflowError

BOUNDARY = 0.8
"""Where the linear part of the warp ends, as a share of the Nyquist frequency (for factors above
1 the share of Nyquist divided by the factor): Kaldi's VTLN keeps the top 500 Hz of 8 kHz (16 kHz
audio) fixed; Jaitly & Hinton's 4.8 kHz boundary is 0.6 of theirs. 0.8 warps the first three
formants of narrowband speech (below 3.2 kHz at 8 kHz) linearly."""


def warp(freqs: np.ndarray, alpha: float, nyquist: float, boundary: float = BOUNDARY) -> np.ndarray:
    """Jaitly & Hinton's piecewise-linear warp of ``freqs`` (Hz) by ``alpha``.

    >>> warp(np.array([0.0, 1000.0, 4000.0]), 1.1, 4000.0).round(1).tolist()
    [0.0, 1100.0, 4000.0]
    >>> warp(np.array([1000.0]), 1.0, 4000.0).tolist()
    [1000.0]
    """
    return np.interp(freqs, *_breakpoints(alpha, nyquist, boundary))


def _breakpoints(alpha: float, nyquist: float, boundary: float) -> tuple[list, list]:
    """The warp's three breakpoints: 0, the knee and Nyquist, and where it maps them."""
    knee = boundary * nyquist * min(alpha, 1.0) / alpha
    return [0.0, knee, nyquist], [0.0, alpha * knee, nyquist]


@functools.lru_cache(maxsize=8)
def mel_centres(n_mels: int, fmin: float, fmax: float, htk: bool = False) -> np.ndarray:
    """Centre frequencies (Hz) of the mel filters of ESPnet's ``LogMel`` (librosa's mel scale,
    Slaney's unless ``htk``)."""
    import librosa  # only a run with augmentation.vtlp needs it

    return librosa.mel_frequencies(n_mels=n_mels + 2, fmin=fmin, fmax=fmax, htk=htk)[1:-1]


def source_positions(alpha: float, n_mels: int, fs: int, **mel: Any) -> np.ndarray:
    """For each mel bin of the warped features, the (fractional) bin of the original features it
    reads: the bin whose centre the warp maps onto that bin's centre. ``mel``: ``fmin``,
    ``fmax`` (default 0 and ``fs / 2``, as ESPnet's) and ``htk`` of the mel filters."""
    return _positions(alpha, _centres(n_mels, fs, mel), fs / 2.0)


def _centres(n_mels: int, fs: int, mel: dict[str, Any]) -> np.ndarray:
    fmin, fmax = float(mel.get("fmin") or 0.0), float(mel.get("fmax") or fs / 2.0)
    return mel_centres(n_mels, fmin, fmax, bool(mel.get("htk")))


def _positions(alpha: float, centres: np.ndarray, nyquist: float) -> np.ndarray:
    warped_at, source_at = _breakpoints(alpha, nyquist, BOUNDARY)[::-1]
    sources = np.interp(centres, warped_at, source_at)  # the warp's inverse, exactly
    return np.interp(sources, centres, np.arange(len(centres), dtype=np.float64))


class Vtlp(torch.nn.Module):
    """Warps each utterance's ``(B, T, n_mels)`` features by a factor drawn uniformly from
    ``[low, high]``, then hands them to ``after`` (the model's SpecAugment, or None). ``mel``:
    the mel filters' ``fmin``, ``fmax`` and ``htk`` (:func:`source_positions`)."""

    def __init__(
        self, low: float, high: float, n_mels: int, fs: int, after: Any = None, **mel: Any
    ) -> None:
        super().__init__()
        if not 0.5 <= low <= high <= 2.0:
            raise ValueError(f"VTLP factors [{low}, {high}]: expected 0.5 <= low <= high <= 2")
        self.low, self.high, self.n_mels, self.fs = low, high, n_mels, fs
        self.after = after
        self.centres = _centres(n_mels, fs, mel)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor | None = None) -> Any:
        if feats.shape[-1] != self.n_mels:
            raise ValueError(f"VTLP: features have {feats.shape[-1]} bins, expected {self.n_mels}")
        alphas = torch.empty(feats.shape[0]).uniform_(self.low, self.high).tolist()
        pos = torch.tensor(
            np.stack([_positions(a, self.centres, self.fs / 2.0) for a in alphas]),
            dtype=feats.dtype,
            device=feats.device,
        )  # (B, F)
        lo = pos.floor().long().clamp(0, self.n_mels - 1)
        hi = (lo + 1).clamp(max=self.n_mels - 1)
        w = (pos - lo.to(pos.dtype)).unsqueeze(1)  # (B, 1, F)
        index = lambda i: i.unsqueeze(1).expand(-1, feats.shape[1], -1)  # noqa: E731
        warped = feats.gather(2, index(lo)) * (1 - w) + feats.gather(2, index(hi)) * w
        if self.after is None:
            return warped, lengths
        return self.after(warped, lengths)


def add_vtlp(model: Any, factors: tuple[float, ...]) -> None:
    """Put :class:`Vtlp` with ``factors`` (low, high) in front of ``model.specaug`` (an ESPnet
    ``ESPnetASRModel``, which applies ``specaug`` in training only), with the mel bins and rate
    of the model's log-mel frontend (ESPnet's ``default`` frontend; another has no mel axis to
    warp: an error names the recipe key)."""
    options = getattr(getattr(model.frontend, "logmel", None), "mel_options", None)
    if not options:
        kind = type(model.frontend).__name__
        raise AsrflowError(
            f"augmentation.vtlp warps log-mel features; frontend {kind} computes none: "
            "use frontend: default, or set augmentation.vtlp: []"
        )
    low, high = factors
    mel = {k: options.get(k) for k in ("fmin", "fmax", "htk")}
    n_mels, fs = int(options["n_mels"]), int(options["sr"])
    model.specaug = Vtlp(low, high, n_mels, fs, model.specaug, **mel)
