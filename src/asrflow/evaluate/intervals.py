"""Confidence intervals of pooled error rates: a seeded bootstrap over utterances.

**What is resampled.** Utterances, with replacement, each as a whole: all of an utterance's errors
and reference units move together. A resample draws as many utterance indices as the eval set
has, and its rate is *pooled* exactly as the reported figure is (:func:`asrflow.evaluate.scoring.
pooled`): the errors summed over the drawn utterances divided by their reference units summed
(0 when the drawn utterances have no reference units at all). A mean of per-utterance rates would
weigh a one-word utterance like a fifty-word one and describe the spread of another statistic
than the one in the table. The interval is the central ``level`` (95 %) percentile interval of
the resampled rates (Bisani & Ney, "Bootstrap estimates for confidence intervals in ASR
performance evaluation", ICASSP 2004).

**Why paired.** :func:`difference_interval` scores both systems on the *same* drawn utterances,
so it measures how the difference varies over samples of the same speech; what both systems find
hard cancels out, and the interval of a difference is far narrower than two separate intervals
side by side suggest. Two evaluations are only paired when they scored the same utterances under
the same scoring contract (the report pairs them by utterance ID).

**Limits.** Utterances are taken as independent; those of one speaker or session are not, so on
few speakers the interval is, if anything, too narrow.

The same inputs, resamples and seed give the same interval on every machine (numpy's PCG64
``default_rng``; the sums are of integer counts, so exact). Resamples are drawn in chunks of at
most :data:`CHUNK_ELEMENTS` indices, which does not change the result: 1000 resamples of 100 000
utterances stay under about 100 MB.

Example::

    low, high = rate_interval(word_errors, ref_words)                 # WER, fractions
    diff, low, high = difference_interval(errors_a, errors_b, ref_words)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

METHOD = "paired bootstrap over utterances"

CHUNK_ELEMENTS = 4_000_000
"""Most utterance indices drawn at once (16 MB of indices, 32 MB per gathered column)."""


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap's settings: ``resamples`` of the utterances, drawn with ``seed``, and the
    central ``level`` of the resampled rates as the interval."""

    resamples: int = 1000
    seed: int = 0
    level: float = 0.95

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise ValueError(f"bootstrap resamples must be at least 1, got {self.resamples}")
        if not 0 < self.level < 1:
            raise ValueError(f"bootstrap level must be between 0 and 1, got {self.level}")

    def to_dict(self) -> dict[str, Any]:
        """What a summary records once: ``{method, resamples, seed, level}``."""
        return {
            "method": METHOD,
            "resamples": self.resamples,
            "seed": self.seed,
            "level": self.level,
        }


BOOTSTRAP = Bootstrap()
"""The settings every evaluation summary and the report use (1000 resamples, seed 0, 95 %)."""


def rate_interval(
    errors: ArrayLike,
    totals: ArrayLike,
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """``(low, high)`` of the pooled rate ``sum(errors) / sum(totals)`` (fractions), per
    utterance ``errors`` and reference units ``totals``.

    >>> rate_interval([1, 1, 1], [10, 10, 10])
    (0.1, 0.1)
    """
    Bootstrap(resamples, seed, level)  # checks the settings
    errors, totals = _columns(errors, totals)
    sums = _resampled_sums((errors, totals), resamples, seed)
    return _percentiles(_rates(*sums), level)


def difference_interval(
    errors_a: ArrayLike,
    errors_b: ArrayLike,
    totals: ArrayLike,
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """``(diff, low, high)``: the pooled rate of ``a`` minus that of ``b`` over all utterances,
    and its paired interval (both rates on the same resampled utterances). Element ``i`` of every
    array is the same utterance; ``totals`` its reference units.

    >>> difference_interval([0, 1], [0, 1], [5, 5])
    (0.0, 0.0, 0.0)
    """
    Bootstrap(resamples, seed, level)
    errors_a, errors_b, totals = _columns(errors_a, errors_b, totals)
    diff = _rate(errors_a.sum(), totals.sum()) - _rate(errors_b.sum(), totals.sum())
    sum_a, sum_b, sum_t = _resampled_sums((errors_a, errors_b, totals), resamples, seed)
    low, high = _percentiles(_rates(sum_a, sum_t) - _rates(sum_b, sum_t), level)
    return float(diff), low, high


REPLICA_STREAM = 1
"""Second entry of the seed of the replica draws (``default_rng([seed, REPLICA_STREAM])``), so
that drawing replicas leaves the utterance draws exactly those of :func:`rate_interval`."""


def replicated_interval(
    errors_a: ArrayLike,
    totals: ArrayLike,
    errors_b: ArrayLike | None = None,
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """``(value, low, high)`` of the mean pooled rate of seed replicas: ``errors_a`` has one row
    of per-utterance errors per replica (the same system trained with different seeds), all on
    the same utterances (``totals``: their reference units). ``value`` is the mean of the
    replicas' pooled rates (equal to the pooled rate of their mean errors). With ``errors_b``
    (another system's replicas on the same utterances): the mean rate of ``a`` minus that of ``b``.

    Each resample draws the utterances as :func:`rate_interval` does (the same draws for both
    systems: paired) and, independently for each system, as many of its replicas as it has, with
    replacement. So the interval covers both which utterances were tested and which seeds were
    trained; with one replica per system it is exactly the interval of :func:`rate_interval`
    (:func:`difference_interval`). A bootstrap over k seeds sees (k - 1) / k of their variance,
    so with 2 or 3 seeds the seed part is, if anything, too narrow.

    >>> replicated_interval([[1, 1], [3, 3]], [10, 10])
    (0.2, 0.1, 0.3)
    """
    Bootstrap(resamples, seed, level)
    a = _replica_rows(errors_a)
    b = _replica_rows(errors_b) if errors_b is not None else np.empty((0, a.shape[1]))
    *rows, totals = _columns(*a, *b, totals)
    *sums, sum_t = _resampled_sums([*rows, totals], resamples, seed)
    replica_rng = np.random.default_rng([seed, REPLICA_STREAM])
    systems = [(1.0, slice(0, len(a)))]
    if errors_b is not None:
        systems.append((-1.0, slice(len(a), None)))
    value, rates = 0.0, np.zeros(resamples)
    for sign, replicas in systems:
        value += sign * _rate(np.mean([r.sum() for r in rows[replicas]]), totals.sum())
        rates += sign * _rates(_replica_means(np.stack(sums[replicas]), replica_rng), sum_t)
    low, high = _percentiles(rates, level)
    return float(value), low, high


def _replica_rows(errors: ArrayLike) -> np.ndarray:
    """Per-utterance errors as a (replicas x utterances) array (one vector: one replica)."""
    rows = np.asarray(errors, dtype=np.float64)
    rows = rows.reshape(1, -1) if rows.ndim == 1 else rows
    if rows.ndim != 2 or not rows.shape[0]:
        raise ValueError("expected one row of per-utterance errors per replica")
    return rows


def _replica_means(sums: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per resample (column of ``sums``, one row per replica): the mean over as many replicas as
    there are, drawn with replacement."""
    k, resamples = sums.shape
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=resamples)
    return (counts.T * sums).sum(axis=0) / k


def error_rate_intervals(
    word_errors: ArrayLike,
    ref_words: ArrayLike,
    char_errors: ArrayLike,
    ref_chars: ArrayLike,
    bootstrap: Bootstrap,
) -> dict[str, float | None]:
    """``wer_ci_low``, ``wer_ci_high``, ``cer_ci_low``, ``cer_ci_high`` (fractions) of a set of
    utterances; ``None`` where the pooled rate itself is undefined (no reference units)."""
    out: dict[str, float | None] = {}
    settings = {"resamples": bootstrap.resamples, "seed": bootstrap.seed, "level": bootstrap.level}
    for name, errors, totals in (
        ("wer", word_errors, ref_words),
        ("cer", char_errors, ref_chars),
    ):
        low = high = None
        if np.asarray(totals).sum() > 0:
            low, high = rate_interval(errors, totals, **settings)
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = low, high
    return out


def _columns(*arrays: ArrayLike) -> list[np.ndarray]:
    """The per-utterance counts as float64 vectors of one length (at least one utterance)."""
    columns = [np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]
    lengths = {len(c) for c in columns}
    if len(lengths) != 1:
        raise ValueError(f"per-utterance arrays differ in length: {sorted(lengths)}")
    if not lengths.pop():
        raise ValueError("a bootstrap over utterances needs at least one utterance")
    if any((c < 0).any() for c in columns):
        raise ValueError("error and reference counts cannot be negative")
    return columns


def _resampled_sums(columns: Sequence[np.ndarray], resamples: int, seed: int) -> list[np.ndarray]:
    """Each column summed over each resample's utterances: one vector of ``resamples`` sums per
    column, every column over the same drawn indices."""
    n = len(columns[0])
    rng = np.random.default_rng(seed)
    sums = [np.empty(resamples, dtype=np.float64) for _ in columns]
    chunk = max(1, CHUNK_ELEMENTS // n)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=np.uint32)
        for out, column in zip(sums, columns, strict=True):
            out[start:stop] = column[idx].sum(axis=1)
    return sums


def _rate(errors: float, total: float) -> float:
    return float(errors / total) if total else 0.0


def _rates(errors: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Pooled rate of each resample; 0 for a resample without reference units."""
    out = np.zeros_like(errors)
    np.divide(errors, totals, out=out, where=totals > 0)
    return out


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)
