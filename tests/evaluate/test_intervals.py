"""The bootstrap over utterances (issue 14, section 1): against the exact bootstrap distribution
of a small case, cases with a known answer, determinism, utterances without reference words."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

from asrflow.evaluate import intervals
from asrflow.evaluate.intervals import (
    Bootstrap,
    difference_interval,
    error_rate_intervals,
    rate_interval,
)

ERRORS = np.array([0, 1, 4])
OTHER = np.array([1, 0, 1])
TOTALS = np.array([2, 3, 5])  # unequal lengths: a pooled rate is not a mean of rates here
MANY = 20_000  # Monte Carlo error of a resampled 2.5 % quantile: about 0.001 in probability


def _exact_interval(statistic, n: int, level: float) -> tuple[float, float]:
    """The percentile interval of ``statistic`` over every one of the n**n equally likely
    resamples of n utterances (what the bootstrap approximates), checked to be well defined:
    no atom of the distribution lies within 0.005 of either cut (5 Monte Carlo errors)."""
    values = np.array([statistic(np.array(i)) for i in itertools.product(range(n), repeat=n)])
    atoms = np.unique(values)
    cdf = np.array([(values <= a).mean() for a in atoms])
    tail = (1 - level) / 2
    for cut in (tail, 1 - tail):
        assert np.abs(cdf - cut).min() > 0.005, "choose another level: a cut sits on an atom"
    return float(atoms[np.argmax(cdf >= tail)]), float(atoms[np.argmax(cdf >= 1 - tail)])


def _pooled(errors, totals):
    return lambda idx: errors[idx].sum() / totals[idx].sum()


@pytest.mark.parametrize("level", [0.5, 0.8, 0.9, 0.95])
def test_rate_interval_is_the_exact_bootstrap_interval_of_the_pooled_rate(level):
    exact = _exact_interval(_pooled(ERRORS, TOTALS), 3, level)
    got = rate_interval(ERRORS, TOTALS, resamples=MANY, level=level)
    assert got == pytest.approx(exact)


def test_the_reference_tells_a_pooled_rate_from_a_mean_of_rates():
    """The case above distinguishes the two statistics, so the test above can fail."""
    mean_of_rates = _exact_interval(lambda idx: (ERRORS[idx] / TOTALS[idx]).mean(), 3, 0.5)
    assert rate_interval(ERRORS, TOTALS, resamples=MANY, level=0.5) != pytest.approx(mean_of_rates)


@pytest.mark.parametrize("level", [0.5, 0.8, 0.9, 0.95])
def test_difference_interval_is_the_exact_paired_bootstrap_interval(level):
    def diff(idx):
        return (ERRORS[idx].sum() - OTHER[idx].sum()) / TOTALS[idx].sum()

    exact = _exact_interval(diff, 3, level)
    point, low, high = difference_interval(ERRORS, OTHER, TOTALS, resamples=MANY, level=level)
    assert point == pytest.approx((5 - 2) / 10)
    assert (low, high) == pytest.approx(exact)


def test_identical_systems_differ_by_exactly_zero():
    rng = np.random.default_rng(1)
    totals = rng.integers(1, 20, size=200)
    errors = rng.binomial(totals, 0.15)
    assert difference_interval(errors, errors.copy(), totals) == (0.0, 0.0, 0.0)


def test_a_system_right_on_every_utterance_beats_one_wrong_on_every_one():
    rng = np.random.default_rng(2)
    totals = rng.integers(1, 20, size=50)
    wrong = rng.integers(1, totals + 1)  # at least one error in every utterance
    right = np.zeros_like(totals)
    diff, low, high = difference_interval(wrong, right, totals)
    assert 0 < low <= diff <= high
    diff, low, high = difference_interval(right, wrong, totals)
    assert low <= diff <= high < 0


def test_systems_wrong_on_different_halves_are_not_told_apart():
    totals = np.full(100, 10)
    a = np.where(np.arange(100) % 2 == 0, 2, 0)
    b = np.where(np.arange(100) % 2 == 1, 2, 0)
    diff, low, high = difference_interval(a, b, totals)
    assert diff == 0.0 and low < 0 < high


def test_interval_holds_the_point_estimate_and_narrows_with_more_utterances():
    rng = np.random.default_rng(3)
    widths = []
    for n in (50, 5000):
        totals = rng.integers(1, 20, size=n)
        errors = rng.binomial(totals, 0.2)
        low, high = rate_interval(errors, totals)
        assert low <= errors.sum() / totals.sum() <= high
        widths.append(high - low)
    assert widths[1] < widths[0] / 5  # about sqrt(100) = 10 times narrower


def test_same_seed_same_interval_other_seed_other_interval(monkeypatch):
    rng = np.random.default_rng(4)
    totals = rng.integers(1, 20, size=300)
    errors = rng.binomial(totals, 0.2)
    first = rate_interval(errors, totals, seed=7)
    assert rate_interval(errors, totals, seed=7) == first
    assert rate_interval(errors, totals, seed=8) != first
    monkeypatch.setattr(intervals, "CHUNK_ELEMENTS", 1000)  # 3 resamples a chunk
    assert rate_interval(errors, totals, seed=7) == first  # chunking changes nothing


def test_resamples_without_reference_words_count_as_rate_zero():
    # resamples {0,0}: no words, rate 0 (p 1/4); {0,1}: 4/10 (p 1/2); {1,1}: 2/20 (p 1/4)
    assert rate_interval([3, 1], [0, 10], resamples=MANY) == (0.0, 0.4)
    assert rate_interval([2, 0, 1], [0, 0, 0]) == (0.0, 0.0)
    assert difference_interval([2, 0], [0, 0], [0, 0]) == (0.0, 0.0, 0.0)
    low, high = rate_interval([1, 0, 1], [0, 3, 0], resamples=200)
    assert np.isfinite([low, high]).all()


def test_error_rate_intervals_are_none_without_reference_units():
    got = error_rate_intervals([1, 0], [4, 6], [2, 0], [0, 0], Bootstrap(resamples=50))
    assert got["wer_ci_low"] <= 0.1 <= got["wer_ci_high"]
    assert got["cer_ci_low"] is None and got["cer_ci_high"] is None


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        rate_interval([1, 2], [3])
    with pytest.raises(ValueError, match="at least one utterance"):
        rate_interval([], [])
    with pytest.raises(ValueError, match="negative"):
        rate_interval([-1], [3])
    with pytest.raises(ValueError, match="level"):
        rate_interval([1], [3], level=1.0)
    with pytest.raises(ValueError, match="resamples"):
        Bootstrap(resamples=0)


def test_100k_utterances_stay_under_100_mb():
    """Resamples are drawn in chunks, so the peak does not grow with their number."""
    rng = np.random.default_rng(5)
    totals = rng.integers(1, 30, size=100_000)
    errors = rng.binomial(totals, 0.1)
    tracemalloc.start()
    try:
        difference_interval(errors, errors // 2, totals, resamples=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MB"
