"""The interval of seed replicas' mean WER, and of the difference of two replicated systems:
utterances and seeds resampled (asrflow.evaluate.intervals.replicated_interval,
asrflow.evaluate.paired.replicated_difference)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from asrflow.evaluate.intervals import (
    Bootstrap,
    difference_interval,
    rate_interval,
    replicated_interval,
)
from asrflow.evaluate.paired import UtteranceErrors, paired_difference, replicated_difference

RNG = np.random.default_rng(7)
TOTALS = RNG.integers(1, 12, 80)
A = RNG.binomial(TOTALS, 0.2)
B = RNG.binomial(TOTALS, 0.3)


def test_one_replica_is_exactly_the_bootstrap_over_utterances():
    mean, low, high = replicated_interval(A, TOTALS)
    assert mean == pytest.approx(A.sum() / TOTALS.sum())
    assert (low, high) == rate_interval(A, TOTALS)
    assert replicated_interval([A], TOTALS, [B]) == difference_interval(A, B, TOTALS)


def test_identical_replicas_add_nothing_and_spread_seeds_widen_the_interval():
    assert replicated_interval([A, A, A], TOTALS) == replicated_interval(A, TOTALS)
    low_errors, high_errors = np.maximum(A - 1, 0), A + 1
    spread = replicated_interval([low_errors, high_errors], TOTALS)
    averaged = replicated_interval((low_errors + high_errors) / 2, TOTALS)  # seeds ignored
    assert spread[0] == pytest.approx(averaged[0])
    assert spread[2] - spread[1] > averaged[2] - averaged[1]


def test_seeds_alone_give_the_bootstrap_over_seeds():
    # every utterance alike: only the draw of the seeds varies (1/4 each of both-first,
    # both-second; 1/2 one of each)
    assert replicated_interval([[1, 1], [3, 3]], [10, 10]) == (0.2, 0.1, 0.3)


def _exact(errors_a, errors_b, totals, level):
    """The percentile interval over every equally likely resample: n**n utterance draws times
    k**k replica draws per system (what the bootstrap approximates)."""
    n, ka, kb = len(totals), len(errors_a), len(errors_b)
    values = []
    for u in itertools.product(range(n), repeat=n):
        idx = np.array(u)
        t = totals[idx].sum()
        for ra in itertools.product(range(ka), repeat=ka):
            a = np.mean([errors_a[r][idx].sum() for r in ra]) / t
            for rb in itertools.product(range(kb), repeat=kb):
                values.append(a - np.mean([errors_b[r][idx].sum() for r in rb]) / t)
    values = np.sort(values)
    tail = (1 - level) / 2
    return np.quantile(values, [tail, 1 - tail])


def test_the_difference_interval_approaches_the_exact_bootstrap_interval():
    a = np.array([[0, 1, 3], [1, 2, 2]])
    b = np.array([[1, 0, 1], [2, 1, 1]])
    totals = np.array([2, 3, 5])
    diff, low, high = replicated_interval(a, totals, b, resamples=20_000, seed=3)
    assert diff == pytest.approx((a.sum() - b.sum()) / 2 / totals.sum())
    exact_low, exact_high = _exact(a, b, totals, 0.8)
    mc_low, mc_high = replicated_interval(a, totals, b, resamples=20_000, seed=3, level=0.8)[1:]
    assert mc_low == pytest.approx(exact_low, abs=0.03)
    assert mc_high == pytest.approx(exact_high, abs=0.03)
    assert low <= mc_low <= diff <= mc_high <= high


def test_replicated_difference_pairs_by_id_and_needs_the_same_utterances():
    ids = np.array([f"u{i:03d}" for i in range(len(TOTALS))], dtype=object)
    a = [UtteranceErrors(ids, A, TOTALS), UtteranceErrors(ids, A + 1, TOTALS)]
    b = [UtteranceErrors(ids[::-1], B[::-1], TOTALS[::-1])]  # another order: paired by ID
    assert replicated_difference(a[:1], b) == paired_difference(a[0], b[0])
    diff, low, high = replicated_difference(a, b)
    assert diff == pytest.approx((A.sum() + 0.5 * len(A) - B.sum()) / TOTALS.sum())
    assert low < diff < high
    assert replicated_difference(a)[0] == pytest.approx((A.sum() + 0.5 * len(A)) / TOTALS.sum())
    fewer = UtteranceErrors(ids[1:], A[1:], TOTALS[1:])
    assert replicated_difference([a[0], fewer]) is None
    assert replicated_difference(a, [fewer]) is None
    assert replicated_difference([], b) is None and replicated_difference(a, []) is None
    settings = Bootstrap(resamples=50, seed=1)
    assert replicated_difference(a, b, settings) != replicated_difference(a, b)


def test_bad_replicas_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        replicated_interval([[1, 2], [1, 2]], [1, 2, 3])
    with pytest.raises(ValueError, match="differ in length"):
        replicated_interval([[1, 2]], [1, 2], [[1, 2, 3]])
    with pytest.raises(ValueError):  # ragged rows
        replicated_interval([[1, 2], [1, 2, 3]], [1, 2])
    with pytest.raises(ValueError, match="one row of per-utterance errors per replica"):
        replicated_interval(np.empty((0, 2)), [1, 2])
