"""The dev set's running sums during training, and the metrics made from them."""

from __future__ import annotations

import pytest

from asrflow.train.loop.dev_scoring import SUMS, DevTally, dev_metrics

REFS = {"a": "one two three", "b": "four five"}


def test_word_and_character_errors_are_summed_over_utterances_not_averaged():
    tally = DevTally(REFS)
    tally.add(["a"], ["one too three"], mean_loss=6.0, num_tokens=13)
    tally.add(["b"], ["four five"], mean_loss=2.0, num_tokens=9)
    assert dict(zip(SUMS, tally.sums(), strict=True)) == {
        "loss_sum": 8.0,
        "tokens": 22,
        "errors": 1,
        "words": 5,
        "char_errors": 1,  # "two" -> "too": one substitution
        "chars": 22,  # the references' characters, spaces included
    }
    metrics = dev_metrics(tally.sums())
    assert metrics["valid/wer"] == pytest.approx(1 / 5)  # not the mean of 1/3 and 0
    assert metrics["valid/loss"] == pytest.approx(8.0 / 22)
    assert metrics["valid/cer"] == pytest.approx(1 / 22)
    assert tally.hyps == {"a": "one too three", "b": "four five"}


def test_a_batch_loss_counts_once_per_utterance():
    tally = DevTally(REFS)
    tally.add(["a", "b"], ["one two three", "four five"], mean_loss=3.0, num_tokens=20)
    assert tally.sums()[:2] == [6.0, 20.0]
    assert dev_metrics(tally.sums())["valid/wer"] == 0.0


def test_an_utterance_without_reference_is_transcribed_not_scored():
    tally = DevTally(REFS)
    tally.add(["x"], ["something"], mean_loss=1.0, num_tokens=4)
    assert tally.hyps == {"x": "something"}
    assert (tally.errors, tally.words) == (0, 0)


def test_an_empty_dev_set_gives_zeros():
    assert dev_metrics(DevTally(REFS).sums()) == {
        "valid/loss": 0.0,
        "valid/wer": 0.0,
        "valid/cer": 0.0,
    }


def test_only_a_batch_of_lhotse_copies_is_padding():
    """Lhotse pads a sharded epoch's last round with ``<id>_dup<n>`` copies of real cuts; a
    batch of them is skipped, a real utterance whose name looks like one is not."""
    tally = DevTally({**REFS, "c_dup1": "six"})
    assert tally.is_padding(["a_dup0"])
    assert tally.is_padding(["a_dup0", "b_dup3"])
    assert not tally.is_padding(["a_dup0", "b"])
    assert not tally.is_padding(["c_dup1"])  # a real utterance of that name
    assert not tally.is_padding(["z_dup0"])  # a copy of nothing in the dev set
    assert not tally.is_padding(["a_dupx"])
