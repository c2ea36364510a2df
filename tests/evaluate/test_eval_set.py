"""What of an eval set is scored: all of it by default; evaluation.filter's exclusions counted."""

from __future__ import annotations

import math

import pytest

from asrflow.data.filter import FilterConfig
from asrflow.errors import AsrflowError
from asrflow.evaluate.eval_set import eval_filter, scored_cuts, scored_sha256
from asrflow.text import TextNormalization
from tests.cuts import audio_less_cut


def _cuts():
    # 2 s, 40 s, 0.2 s and 8 min: a test set of real calls is like this
    return [
        audio_less_cut("a", text="one two", duration=2.0),
        audio_less_cut("b", text="one two three " * 20, duration=40.0),
        audio_less_cut("c", text="no", duration=0.2),
        audio_less_cut("d", text="four five six " * 300, duration=480.0),
    ]


def test_without_a_filter_every_utterance_is_scored():
    cuts = _cuts()
    kept, cover = scored_cuts(cuts, eval_filter(None), TextNormalization())
    assert [c.id for c in kept] == ["a", "b", "c", "d"]
    assert cover["utterances_total"] == cover["utterances_scored"] == 4
    assert cover["utterances_excluded"] == 0 and cover["excluded_by_reason"] == {}
    assert cover["seconds_scored"] == cover["seconds_total"] == pytest.approx(522.2)
    assert cover["complete"] is True and cover["eval_filter"] is None


def test_a_filter_excludes_by_reason_and_counts_what_it_excluded():
    kept, cover = scored_cuts(_cuts(), eval_filter({"max_duration": 60}), TextNormalization())
    assert [c.id for c in kept] == ["a", "b", "c"]  # unset bounds are no bounds: c stays
    assert cover["utterances_excluded"] == 1 and cover["excluded_by_reason"] == {"too_long": 1}
    assert cover["excluded_ids"] == {"too_long": ["d"]}
    assert cover["seconds_excluded"] == pytest.approx(480.0) and cover["complete"] is False
    assert cover["eval_filter"]["max_duration"] == 60
    assert cover["eval_filter"]["max_chars_per_second"] == "inf"


def test_unset_bounds_are_no_bounds_and_bad_ones_are_named():
    cfg = eval_filter({})
    assert (cfg.min_duration, cfg.max_duration) == (0.0, math.inf)
    assert (cfg.min_chars_per_second, cfg.max_chars_per_second) == (0.0, math.inf)
    with pytest.raises(AsrflowError, match=r"filter\.min_duration"):
        eval_filter({"min_duration": 5, "max_duration": 1})
    with pytest.raises(AsrflowError, match="unknown"):
        eval_filter({"max_seconds": 5})


def test_a_filtered_set_never_shares_the_whole_sets_cuts_digest():
    whole = scored_sha256("ab" * 32, None)
    assert whole == "ab" * 32
    filtered = scored_sha256("ab" * 32, FilterConfig(max_duration=60))
    other = scored_sha256("ab" * 32, FilterConfig(max_duration=61))
    assert len({whole, filtered, other}) == 3


def test_the_same_bounds_written_otherwise_are_one_filter():
    assert scored_sha256("ab" * 32, eval_filter({"max_duration": 60})) == scored_sha256(
        "ab" * 32, eval_filter({"max_duration": 60.0, "min_duration": 0})
    )
