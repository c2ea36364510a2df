"""Tests for asrflow.text: the one text normalization."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrflow.errors import AsrflowError
from asrflow.text import TextNormalization, normalize


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Hello, World!", "hello world"),
        ("  many   spaces\tand\nlines  ", "many spaces and lines"),
        ("¿Qué tal?  ¡Muy bien!", "qué tal muy bien"),
        ("well-known (sic) [noise] «quoted» — dash…", "well known sic noise quoted dash"),
        ("hello,world", "hello world"),  # punctuation separates, never glues words
        ("ＦＵＬＬ ｗｉｄｔｈ ﬁne", "full width fine"),  # NFKC folds compatibility forms
        ("$3 + 2 = 5€", "$3 + 2 = 5€"),  # symbols (S*) are not punctuation
        ("50% & co", "50 co"),  # but % and & are (Po)
        ("", ""),
        ("?!...", ""),
    ],
)
def test_case_punctuation_whitespace(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Don't stop", "don't stop"),
        ("rock'n'roll", "rock'n'roll"),
        ("O’Brien isn’t here", "o'brien isn't here"),  # typographic apostrophes unified
        ("'quoted' words'", "quoted words"),  # edge apostrophes stripped
        ("a ' lone one", "a lone one"),
        ("two''marks", "two marks"),
        ("'", ""),
        ("dogs'.", "dogs"),
    ],
)
def test_apostrophes(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_keep_can_be_emptied() -> None:
    assert normalize("don't", TextNormalization(keep="")) == "don t"


def test_unify_apostrophes_off() -> None:
    assert normalize("isn’t", TextNormalization(unify_apostrophes=False)) == "isn t"


def test_spanish_accents_kept() -> None:
    assert normalize("CANCIÓN Ñandú Pingüino AÑO") == "canción ñandú pingüino año"
    # Decomposed input composes to the same string under NFKC.
    assert normalize("cancio\u0301n") == "canción"


def test_switches_off() -> None:
    raw = "  Hola,   Mundo!  "
    norm = TextNormalization(lowercase=False, strip_punctuation=False, collapse_whitespace=False)
    assert normalize(raw, norm) == "Hola,   Mundo!"


def test_replacements_whole_word() -> None:
    norm = TextNormalization(replacements={"ok": "okay", "uh": ""})
    assert normalize("OK, uh, it's ok. Okay? book", norm) == "okay it's okay okay book"
    # Whole words only: "ok" inside "book"/"okay" is untouched.
    assert normalize("booking okapi", norm) == "booking okapi"


def test_replacements_multiword_value() -> None:
    norm = TextNormalization(replacements={"usa": "u s a"})
    assert normalize("USA!", norm) == "u s a"


@pytest.mark.parametrize(
    "replacements",
    [
        {"OK": "okay"},  # key not normalized
        {"two words": "x"},  # key not a single word
        {"ee.uu": "x"},  # key not normalized (punctuation)
        {"ok": "Okay"},  # value not normalized
        {"a": "b", "b": "c"},  # chain: not idempotent
        {"ok": 1},
    ],
)
def test_bad_replacements_rejected(replacements: dict) -> None:
    with pytest.raises(AsrflowError):
        TextNormalization(replacements=replacements)


def test_bad_settings_rejected() -> None:
    with pytest.raises(AsrflowError, match="unicode_form"):
        TextNormalization(unicode_form="NFX")
    with pytest.raises(AsrflowError, match="keep"):
        TextNormalization(keep="a")
    with pytest.raises(AsrflowError, match="lowercase"):
        TextNormalization(lowercase="yes")  # type: ignore[arg-type]
    with pytest.raises(AsrflowError, match="unknown setting"):
        TextNormalization.from_dict({"lower_case": True})


def test_dict_round_trip_and_pickle() -> None:
    norm = TextNormalization(lowercase=False, keep="'-", replacements={"ok": "okay"})
    again = TextNormalization.from_dict(norm.to_dict())
    assert again == norm
    assert again.sha256() == norm.sha256()
    assert hash(again) == hash(norm)
    assert pickle.loads(pickle.dumps(norm)) == norm
    assert TextNormalization.from_dict(None) == TextNormalization()


def test_hash_stable_and_sensitive() -> None:
    default = TextNormalization()
    assert default.sha256() == TextNormalization().sha256()
    assert len(default.sha256()) == 64
    variants = [
        TextNormalization(lowercase=False),
        TextNormalization(strip_punctuation=False),
        TextNormalization(keep=""),
        TextNormalization(collapse_whitespace=False),
        TextNormalization(unicode_form="NFC"),
        TextNormalization(unify_apostrophes=False),
        TextNormalization(replacements={"ok": "okay"}),
        TextNormalization(replacements={"ok": "o k"}),
    ]
    digests = {v.sha256() for v in variants} | {default.sha256()}
    assert len(digests) == len(variants) + 1
    # Order of replacements does not matter.
    a = TextNormalization(replacements={"ok": "okay", "uh": ""})
    b = TextNormalization(replacements={"uh": "", "ok": "okay"})
    assert a.sha256() == b.sha256()


def test_hash_pinned() -> None:
    """The default contract's digest; if this changes, every recorded result changes meaning."""
    assert TextNormalization().sha256() == (
        "c652867dcbfbccfa0b04f200ed5d0a7cae0433066bc8bd62c363b1d8f3c55c5f"
    )


_NORMS = [
    TextNormalization(),
    TextNormalization(unicode_form="NFD"),
    TextNormalization(unicode_form="NFC", keep="'-"),
    TextNormalization(lowercase=False, collapse_whitespace=False),
    TextNormalization(strip_punctuation=False),
    TextNormalization(replacements={"ok": "okay", "uh": "", "usa": "u s a"}),
]


@settings(max_examples=400, deadline=None)
@given(st.text(), st.sampled_from(_NORMS))
def test_idempotent(raw: str, norm: TextNormalization) -> None:
    once = normalize(raw, norm)
    assert normalize(once, norm) == once


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("abcdeñóÓ'’ \t.,!?-OKokUuHhsaSA")),
        max_size=40,
    ),
    st.sampled_from(_NORMS),
)
def test_idempotent_dense(raw: str, norm: TextNormalization) -> None:
    """Like test_idempotent, over an alphabet dense in apostrophes, punctuation and keys."""
    once = normalize(raw, norm)
    assert normalize(once, norm) == once
    if norm.collapse_whitespace:
        assert "  " not in once and once == once.strip()
