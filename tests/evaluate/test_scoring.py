from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrflow.evaluate.scoring import (
    MISSING_SLICE,
    UTTERANCE_COLUMNS,
    by_slice,
    confusions,
    format_alignments,
    pooled,
    score_utterance,
    write_alignments,
    write_utterances_csv,
)
from asrflow.text import TextNormalization

CONTRACT = TextNormalization()


def test_hand_counted_word_errors():
    # ref: the cat sat on the mat today        (7 words)
    # hyp: a   cat sat on *** mat today now
    #      S              D             I     -> H=5 S=1 D=1 I=1
    s = score_utterance(
        "u1", "the cat sat on the mat today", "a cat sat on mat today now", CONTRACT
    )
    assert (s.ref_words, s.hits, s.substitutions, s.deletions, s.insertions) == (7, 5, 1, 1, 1)
    assert s.word_errors == 3
    assert pooled([s])["wer"] == pytest.approx(3 / 7)


def test_hand_counted_character_errors_include_spaces():
    # ref "cat sat" is 7 characters (the space counts, as in training's valid/cer);
    # hyp "bat sa": c->b substituted, final t deleted.
    s = score_utterance("u1", "cat sat", "bat sa", CONTRACT)
    assert s.ref_chars == 7
    assert (s.char_substitutions, s.char_deletions, s.char_insertions) == (1, 1, 0)
    assert s.char_errors == 2
    assert (s.substitutions, s.ref_words) == (2, 2)
    p = pooled([s])
    assert p["cer"] == pytest.approx(2 / 7)
    assert p["wer"] == pytest.approx(1.0)


def test_pooled_is_not_a_mean_of_utterance_rates():
    short = score_utterance("a", "yes", "no", CONTRACT)  # 1 error / 1 word
    long = score_utterance(
        "b",
        "one two three four five six seven eight nine",
        "one two three four five six seven eight nine",
        CONTRACT,
    )
    p = pooled([short, long])
    mean_of_rates = (1 / 1 + 0 / 9) / 2
    assert p["wer"] == pytest.approx(1 / 10)
    assert mean_of_rates == pytest.approx(0.5)
    assert p["wer"] != pytest.approx(mean_of_rates)
    assert p["num_utterances"] == 2
    assert p["sentence_error_rate"] == pytest.approx(0.5)
    assert (p["ref_words"], p["word_errors"]) == (10, 1)


def test_case_and_punctuation_are_not_errors():
    s = score_utterance("u1", "Hello, World!", "hello world", CONTRACT)
    assert s.word_errors == 0 and s.char_errors == 0
    assert s.ref_norm == s.hyp_norm == "hello world"
    assert s.alignment == ""


def test_accepted_alternative_spelling_counts_as_correct():
    contract = TextNormalization(replacements={"ok": "okay"})
    s = score_utterance("u1", "Okay then.", "OK then", contract)
    assert s.word_errors == 0 and s.char_errors == 0
    # without the replacement it is a substitution
    assert score_utterance("u1", "Okay then.", "OK then", CONTRACT).substitutions == 1


def test_empty_hypothesis_is_all_deletions():
    s = score_utterance("u1", "a b c", "", CONTRACT)
    assert (s.hyp_norm, s.hits, s.substitutions, s.deletions, s.insertions) == ("", 0, 0, 3, 0)
    assert (s.ref_chars, s.char_deletions, s.char_errors) == (5, 5, 5)
    assert "D" in s.alignment.splitlines()[2]
    assert pooled([s])["wer"] == pytest.approx(1.0)


@pytest.mark.parametrize("reference", ["", "  ", "?!"])
def test_empty_reference_is_all_insertions(reference):
    s = score_utterance("u1", reference, "uh huh", CONTRACT)
    assert (s.ref_words, s.insertions, s.word_errors) == (0, 2, 2)
    assert (s.ref_chars, s.char_insertions) == (0, 6)
    assert s.alignment.splitlines()[2].split() == ["I", "I"]
    p = pooled([s])
    assert p["wer"] is None and p["cer"] is None
    assert p["word_errors"] == 2


def test_empty_reference_and_hypothesis():
    s = score_utterance("u1", "", "", CONTRACT)
    assert s.word_errors == s.char_errors == s.ref_words == 0
    assert s.alignment == ""
    assert pooled([])["wer"] is None and pooled([])["sentence_error_rate"] is None


def test_alignment_text_marks_substitution_deletion_insertion():
    s = score_utterance(
        "u1", "the cat sat on the mat today", "a cat sat on mat today now", CONTRACT
    )
    ref, hyp, marks = s.alignment.splitlines()
    assert ref.startswith("REF: ") and hyp.startswith("HYP: ")
    assert ref == "REF: the cat sat on the mat today ***"
    assert hyp == "HYP: a   cat sat on *** mat today now"
    assert marks == "     S              D             I"
    text = format_alignments([s, score_utterance("ok", "x", "x", CONTRACT)], header="# test")
    assert text.startswith("# test\n\nmost frequent word errors\n")
    assert "\n\nu1\nREF:" in text
    assert "S=1 D=1 I=1" in text
    assert "\nok\n" not in text


def test_confusions_count_the_word_errors_of_every_utterance():
    """sclite's dtl lists, from the alignments that WER counts: substitution pairs, deleted and
    inserted words, most frequent first (ties alphabetical), and each reference word's errors
    beside how often it occurs."""
    scores = [
        score_utterance("1", "four two four", "five two five", CONTRACT),
        score_utterance("2", "four three", "five three", CONTRACT),
        score_utterance("3", "three eight", "eight", CONTRACT),  # three deleted
        score_utterance("4", "one", "one six", CONTRACT),  # six inserted
        score_utterance("5", "", "six", CONTRACT),  # an empty reference: an insertion
        score_utterance("6", "nine", "nine", CONTRACT),
    ]
    found = confusions(scores)
    assert found["substitutions"] == [["four", "five", 3]]
    assert found["deletions"] == [["three", 1]]
    assert found["insertions"] == [["six", 2]]
    assert found["words_wrong"] == [["four", 3, 3], ["three", 1, 2]]
    # the counts are the ones pooled() adds up
    totals = pooled(scores)
    assert sum(n for *_, n in found["substitutions"]) == totals["substitutions"]
    assert sum(n for _, n in found["deletions"]) == totals["deletions"]
    assert sum(n for _, n in found["insertions"]) == totals["insertions"]
    # top N of each, ties in alphabetical order
    many = [score_utterance(str(i), w, "x", CONTRACT) for i, w in enumerate("dcba")]
    assert confusions(many, top=2)["substitutions"] == [["a", "x", 1], ["b", "x", 1]]
    assert confusions([score_utterance("ok", "a b", "a b", CONTRACT)]) == {
        "substitutions": [],
        "deletions": [],
        "insertions": [],
        "words_wrong": [],
    }
    # alignments.txt lists them after its header
    text = format_alignments(scores, header="# test")
    assert text.startswith("# test\n\nmost frequent word errors\n  substitutions: four -> five 3\n")
    assert "  reference words most often wrong (wrong/occurrences): four 3/3, three 1/2\n" in text
    assert format_alignments(scores[-1:], header="# test") == "# test\n"


def test_by_slice_pools_per_value():
    scores = [
        score_utterance("1", "a b", "a b", CONTRACT, {"speaker": "s1", "noise": "clean"}),
        score_utterance("2", "a b", "a c", CONTRACT, {"speaker": "s1"}),
        score_utterance("3", "a b c d", "", CONTRACT, {"speaker": "s2", "noise": "noisy"}),
    ]
    slices = by_slice(scores, ["speaker", "noise"])
    assert set(slices) == {"speaker", "noise"}
    assert slices["speaker"]["s1"]["num_utterances"] == 2
    assert slices["speaker"]["s1"]["word_errors"] == 1
    assert slices["speaker"]["s1"]["wer"] == pytest.approx(1 / 4)
    assert slices["speaker"]["s2"]["wer"] == pytest.approx(1.0)
    assert set(slices["noise"]) == {"clean", "noisy", MISSING_SLICE}
    assert slices["noise"][MISSING_SLICE]["num_utterances"] == 1


def test_utterances_csv_round_trip(tmp_path):
    scores = [
        score_utterance("u1", "Hello, World!", "hello word", CONTRACT, {"speaker": "s1"}),
        score_utterance("u2", "a b c", "", CONTRACT, {"condition": "noisy"}),
    ]
    path = tmp_path / "sub" / "utterances.csv"
    write_utterances_csv(scores, path)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert list(df.columns) == [*UTTERANCE_COLUMNS, "condition", "speaker"]
    assert df["id"].tolist() == ["u1", "u2"]
    assert df["reference"].tolist() == ["Hello, World!", "a b c"]
    assert df["hypothesis"].tolist() == ["hello word", ""]
    assert df["word_errors"].astype(int).tolist() == [1, 3]
    assert df["char_errors"].astype(int).tolist() == [1, 5]
    assert df["speaker"].tolist() == ["s1", ""]
    assert not list(tmp_path.joinpath("sub").glob(".*"))  # no temporary left behind


def test_write_alignments_only_erroneous_utterances(tmp_path):
    scores = [
        score_utterance("good", "a b", "a b", CONTRACT),
        score_utterance("bad", "a b", "a", CONTRACT),
    ]
    path = tmp_path / "alignments.txt"
    write_alignments(scores, path, header="contract abc")
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "contract abc"
    assert "bad\nREF: a b\nHYP: a *\n       D\nS=0 D=1 I=0" in text
    assert "good" not in text


words = st.lists(st.sampled_from(["a", "b", "cat", "dog", "ok"]), max_size=8)


@settings(max_examples=60, deadline=None)
@given(ref=words, hyp=words)
def test_counts_are_consistent(ref, hyp):
    s = score_utterance("u", " ".join(ref), " ".join(hyp), CONTRACT)
    assert s.ref_words == len(ref)
    assert s.hits + s.substitutions + s.insertions == len(hyp)
    assert s.word_errors >= abs(len(ref) - len(hyp))
    assert s.ref_chars == len(" ".join(ref))
    assert (s.word_errors == 0) == (ref == hyp)
    assert (s.alignment == "") == (s.word_errors == 0)
    same = score_utterance("u", " ".join(ref), " ".join(ref), CONTRACT)
    assert same.word_errors == same.char_errors == 0


def test_the_contract_digest_covers_the_normalization_and_the_scorer_version(monkeypatch):
    """Figures from two versions of the scorer are never ranked together (issue 11)."""
    from asrflow.evaluate import scoring

    before = scoring.contract_sha256(CONTRACT)
    assert before != CONTRACT.sha256()
    other = TextNormalization.from_dict({**CONTRACT.to_dict(), "lowercase": False})
    assert scoring.contract_sha256(other) != before
    monkeypatch.setattr(scoring, "SCORING_VERSION", scoring.SCORING_VERSION + 1)
    assert scoring.contract_sha256(CONTRACT) != before
