"""The evaluation summary's intervals (issue 14): overall and per slice, fractions like ``wer``."""

from __future__ import annotations

import pytest

from asrflow.evaluate.intervals import BOOTSTRAP, rate_interval
from asrflow.evaluate.scoring import MISSING_SLICE, pooled, score_utterance
from asrflow.evaluate.stages import score_intervals, sliced_with_intervals
from asrflow.text import TextNormalization

KEYS = ("wer_ci_low", "wer_ci_high", "cer_ci_low", "cer_ci_high")


def _scores():
    pairs = [
        ("the cat sat", "the cat sat", "s1"),
        ("a dog ran far away", "a dog ran", "s1"),
        ("hello there", "yellow there", "s2"),
        ("one two three four", "one too three for", "s2"),
        ("", "uh", None),  # no reference words; no speaker
    ]
    return [
        score_utterance(f"u{i}", ref, hyp, TextNormalization(), {"speaker": spk} if spk else {})
        for i, (ref, hyp, spk) in enumerate(pairs)
    ]


def test_overall_intervals_are_the_bootstrap_of_the_pooled_rates():
    scores = _scores()
    got = score_intervals(scores)
    assert set(got) == set(KEYS)
    words = rate_interval([s.word_errors for s in scores], [s.ref_words for s in scores])
    chars = rate_interval([s.char_errors for s in scores], [s.ref_chars for s in scores])
    assert (got["wer_ci_low"], got["wer_ci_high"]) == words
    assert (got["cer_ci_low"], got["cer_ci_high"]) == chars
    p = pooled(scores)
    assert got["wer_ci_low"] <= p["wer"] <= got["wer_ci_high"]  # fractions, as wer
    assert got["wer_ci_low"] < got["wer_ci_high"] < 1.5


def test_every_slice_value_has_intervals_over_its_own_utterances():
    scores = _scores()
    slices = sliced_with_intervals(scores, ["speaker"])
    assert set(slices["speaker"]) == {"s1", "s2", MISSING_SLICE}
    s2 = [s for s in scores if s.fields.get("speaker") == "s2"]
    assert slices["speaker"]["s2"]["wer"] == pooled(s2)["wer"]
    assert (slices["speaker"]["s2"]["wer_ci_low"], slices["speaker"]["s2"]["wer_ci_high"]) == (
        rate_interval([s.word_errors for s in s2], [s.ref_words for s in s2])
    )
    # the utterance without speaker has no reference words: no rate, so no interval
    assert slices["speaker"][MISSING_SLICE]["wer"] is None
    assert slices["speaker"][MISSING_SLICE]["wer_ci_low"] is None
    s1 = slices["speaker"]["s1"]
    assert s1["wer_ci_low"] <= s1["wer"] <= s1["wer_ci_high"]


def test_the_summary_records_the_bootstrap_once():
    assert BOOTSTRAP.to_dict() == {
        "method": "paired bootstrap over utterances",
        "resamples": 1000,
        "seed": 0,
        "level": pytest.approx(0.95),
    }
