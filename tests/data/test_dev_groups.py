"""Whether dev measures seen speakers only (issue 31, item 2): dev shares every speaker (or
session) with train while a test set has new ones."""

from __future__ import annotations

from asrflow.data.checks import check_dev_groups, group_values
from asrflow.data.dev_groups import (
    corpus_finding,
    find_dev_seen_groups,
    run_finding,
    split_roles,
)
from asrflow.data.issues import ValidationConfig
from tests.cuts import audio_less_cut

FIELDS = ("speaker", "session")


def speakers(**splits: str) -> dict[str, dict[str, list[str]]]:
    """``speakers(train="abc", dev="a")``: split -> {"speaker": one speaker per letter}."""
    return {split: {"speaker": list(letters)} for split, letters in splits.items()}


def test_dev_of_training_speakers_with_a_test_of_new_ones_warns():
    found = corpus_finding(speakers(train="abcd", dev="ab", test="xyz"), FIELDS, "c")
    assert found is not None
    assert (found.field, found.dev, found.shared) == ("speaker", "dev", 2)
    assert found.unseen == {"test": 3} and found.test_groups == {"test": 3}
    assert found.measures == "seen speakers only"
    assert found.message.startswith("dev measures seen speakers only: all 2 of its speakers")
    assert "test has 3 speakers train does not have (of 3)" in found.message
    assert "says little about speakers the model never heard" in found.message
    # how to fix it in one line, or keep it on purpose
    holdout = "holdout: {manifest: <all utterances>, by: speaker, fractions: {dev: 0.1, test: 0.1}}"
    assert holdout in found.hint and "in corpora.c" in found.hint
    assert "allow_group_overlap: [speaker]" in found.hint
    assert found.to_dict() == {
        "field": "speaker",
        "dev": "dev",
        "train": ["train"],
        "shared": 2,
        "unseen": {"test": 3},
        "test_groups": {"test": 3},
        "measures": "seen speakers only",
        "message": found.message,
        "hint": found.hint,
    }


def test_a_test_set_partly_of_training_speakers_counts_only_the_new_ones():
    found = corpus_finding(speakers(train="abc", dev="a", test="bcx", real="ab"), FIELDS)
    assert found.unseen == {"test": 1} and found.test_groups == {"test": 3}
    assert "its one speaker is also in train" in found.message
    assert "test has 1 speaker train does not have (of 3)" in found.message


def test_speaker_dependent_by_design_does_not_warn():
    # every split shares every speaker: there is no test set of new speakers to miss
    assert corpus_finding(speakers(train="abc", dev="abc", test="abc"), FIELDS) is None
    assert corpus_finding(speakers(train="abc", dev="ab", test="c"), FIELDS) is None


def test_a_dev_with_a_speaker_of_its_own_does_not_warn():
    assert corpus_finding(speakers(train="abc", dev="abd", test="xyz"), FIELDS) is None
    assert corpus_finding(speakers(train="abc", dev="d", test="xyz"), FIELDS) is None


def test_no_speakers_no_dev_or_no_train_cannot_tell():
    assert corpus_finding(speakers(train="", dev="", test="xyz"), FIELDS) is None
    assert corpus_finding(speakers(train="abc", test="xyz"), FIELDS) is None
    assert corpus_finding(speakers(dev="abc", test="xyz"), FIELDS) is None


def test_sessions_are_checked_when_speakers_do_not_tell():
    groups = {
        "train": {"speaker": [], "session": ["s1", "s2"]},
        "dev": {"speaker": [], "session": ["s2"]},
        "test": {"speaker": [], "session": ["s9"]},
    }
    found = corpus_finding(groups, FIELDS)
    assert (found.field, found.measures, found.unseen) == (
        "session",
        "seen sessions only",
        {"test": 1},
    )
    assert "by: session" in found.hint
    assert "allow_group_overlap: [session]" in found.hint
    # speakers come first: new sessions of training speakers still measure seen speakers only
    groups = {
        "train": {"speaker": ["a"], "session": ["a1"]},
        "dev": {"speaker": ["a"], "session": ["a2"]},
        "test": {"speaker": ["b"], "session": ["b1"]},
    }
    assert corpus_finding(groups, FIELDS).field == "speaker"
    assert corpus_finding(groups, ["session"]) is None  # dev's session a2 is its own


def test_split_roles_treat_every_other_split_as_a_test_set():
    assert split_roles(["train", "dev", "test", "real"]) == (["train"], "dev", ["test", "real"])
    assert split_roles(["dev", "test"]) == ([], "dev", ["test"])


def test_several_train_splits_pool_their_speakers():
    groups = speakers(**{"a.train": "ab", "b.train": "cd", "a.dev": "ac", "a.test": "x"})
    found = find_dev_seen_groups(
        groups, train=["a.train", "b.train"], dev="a.dev", tests=["a.test"], fields=FIELDS
    )
    assert found.shared == 2 and "also in a.train and b.train" in found.message
    groups["b.train"] = {"speaker": ["d"]}
    assert (
        find_dev_seen_groups(
            groups, train=["a.train", "b.train"], dev="a.dev", tests=["a.test"], fields=FIELDS
        )
        is None
    )


def report(corpus: str, groups: dict | None, fields=FIELDS) -> dict:
    out = {"corpus": corpus, "config": {"group_fields": list(fields)}}
    if groups is not None:
        out["groups"] = groups
    return out


def test_a_run_is_judged_on_its_own_train_dev_and_test_sets():
    reports = [
        report("demo", speakers(train="abc", dev="ab", test="abc")),
        report("real", speakers(messages="xy")),
    ]
    found = run_finding(
        reports,
        train_corpora=["demo"],
        dev_set="demo.dev",
        test_sets=["demo.test", "real.messages"],
    )
    assert found.dev == "demo.dev" and found.unseen == {"real.messages": 2}
    assert "in corpora.demo" in found.hint
    # without the extra set the run has no test set of new speakers
    assert (
        run_finding(reports, train_corpora=["demo"], dev_set="demo.dev", test_sets=["demo.test"])
        is None
    )


def test_a_report_without_group_values_cannot_tell():
    reports = [report("demo", None), report("real", speakers(messages="xy"))]
    assert (
        run_finding(
            reports, train_corpora=["demo"], dev_set="demo.dev", test_sets=["real.messages"]
        )
        is None
    )


def corpus_cuts(**splits: str) -> dict:
    return {
        split: [
            audio_less_cut(f"{split}-{k}", speaker=spk, session=f"{spk}-{split}")
            for k, spk in enumerate(letters)
        ]
        for split, letters in splits.items()
    }


def test_group_values_are_each_splits_sorted_values():
    cuts = corpus_cuts(train="ba", dev="a")
    cuts["dev"].append(audio_less_cut("no-speaker"))
    assert group_values(cuts, FIELDS) == {
        "train": {"speaker": ["a", "b"], "session": ["a-train", "b-train"]},
        "dev": {"speaker": ["a"], "session": ["a-dev"]},
    }


def test_the_check_warns_only_for_fields_allowed_to_overlap():
    cuts = corpus_cuts(train="abc", dev="ab", test="xy")
    allowed = ValidationConfig(allow_group_overlap=("speaker",))
    [issue] = check_dev_groups(cuts, allowed, corpus="c")
    assert (issue.severity, issue.code, issue.split, issue.item) == (
        "warning",
        "dev_seen_groups",
        "dev",
        "speakers",
    )
    assert "dev measures seen speakers only" in issue.message
    # not allowed: a shared speaker is the error group_in_two_splits already
    assert list(check_dev_groups(cuts, ValidationConfig(), corpus="c")) == []
