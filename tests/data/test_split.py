import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse.testing.dummies import dummy_cut, dummy_supervision

from asrflow.data.cuts import field
from asrflow.data.split import group_holdout
from asrflow.errors import AsrflowError


def make_cuts(groups: list[int], key: str = "speaker"):
    cuts = []
    for i, g in enumerate(groups):
        sup = dummy_supervision(i, start=0.0, duration=1.0)
        if key == "speaker":
            sup.speaker = f"spk{g}"
        sup.custom = {"session": f"sess{g}"}
        cut = dummy_cut(i, duration=1.0, supervisions=[sup])
        cuts.append(cut)
    return cuts


@settings(max_examples=50, deadline=None)
@given(groups=st.lists(st.integers(0, 30), min_size=4, max_size=200), seed=st.integers(0, 5))
def test_no_group_spans_two_splits(groups, seed):
    if len(set(groups)) < 3:
        return
    cuts = make_cuts(groups)
    splits = group_holdout(cuts, "speaker", {"dev": 0.1, "test": 0.1}, seed)
    owner = {}
    for name, members in splits.items():
        for cut in members:
            assert owner.setdefault(field(cut, "speaker"), name) == name
    assert sum(len(m) for m in splits.values()) == len(cuts)
    assert all(splits[name] for name in ("train", "dev", "test"))


def test_deterministic_and_seed_dependent():
    cuts = make_cuts([i % 20 for i in range(200)])
    a = group_holdout(cuts, "session", {"dev": 0.2}, seed=1)
    b = group_holdout(cuts, "session", {"dev": 0.2}, seed=1)
    c = group_holdout(cuts, "session", {"dev": 0.2}, seed=2)

    def ids(splits):
        return sorted(x.id for x in splits["dev"])

    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert len(a["dev"]) == pytest.approx(40, abs=10)


def test_missing_key_names_the_items():
    cuts = make_cuts([0, 1, 2, 3])
    with pytest.raises(AsrflowError, match="no 'room' field"):
        group_holdout(cuts, "room", {"dev": 0.1}, 0)


def test_too_few_groups_and_bad_fractions():
    with pytest.raises(AsrflowError, match="only 2 group"):
        group_holdout(make_cuts([0, 1]), "speaker", {"dev": 0.1, "test": 0.1}, 0)
    with pytest.raises(AsrflowError, match="sum to less than 1"):
        group_holdout(make_cuts([0, 1, 2]), "speaker", {"dev": 0.6, "test": 0.5}, 0)
