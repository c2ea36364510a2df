"""Tests for asrflow.data.cuts: the cut conventions and their (de)serialization."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from lhotse import MonoCut, Recording, SupervisionSegment
from lhotse.audio import AudioSource

from asrflow.data.cuts import (
    ORIGIN,
    SEGMENT,
    field,
    load_cuts,
    origin,
    save_cuts,
    supervision,
    text,
)
from asrflow.data.importers import import_nemo


def make_cut(
    cid: str,
    duration: float = 1.5,
    text: str | None = "hola",
    speaker: str | None = "spk1",
    custom: dict | None = None,
    n_sups: int = 1,
    start: float = 0.0,
) -> MonoCut:
    rec = Recording(
        id=cid,
        sources=[AudioSource(type="file", channels=[0], source=f"/data/{cid}.wav")],
        sampling_rate=16000,
        num_samples=round((start + duration) * 16000),
        duration=start + duration,
    )
    sups = [
        SupervisionSegment(
            id=f"{cid}-{k}" if n_sups > 1 else cid,
            recording_id=cid,
            start=0.0,
            duration=duration,
            channel=0,
            text=text,
            speaker=speaker,
            custom=custom,
        )
        for k in range(n_sups)
    ]
    return MonoCut(
        id=cid, start=start, duration=duration, channel=0, recording=rec, supervisions=sups
    )


CUSTOM = {
    "session": "spk1_s0",
    "condition": "noisy",
    "has_entity": True,
    "code_switch": False,
    "score": 0.25,
    "tags": ["a", "b"],
    ORIGIN: "corpus/train.jsonl:7",
    SEGMENT: True,
}


def test_save_load_roundtrip_keeps_custom_fields_and_origin(tmp_path: Path) -> None:
    cuts = [
        make_cut("u1", custom=dict(CUSTOM), start=0.5),
        make_cut("u2", text="adiós ’n’ 日本", speaker=None, custom={ORIGIN: "x.jsonl:2"}),
    ]
    path = tmp_path / "out" / "cuts.jsonl.gz"
    assert save_cuts(cuts, path) == 2
    loaded = list(load_cuts(path))
    assert [c.id for c in loaded] == ["u1", "u2"]
    a, b = loaded
    assert supervision(a).custom == CUSTOM
    assert origin(a) == "corpus/train.jsonl:7"
    assert field(a, SEGMENT) is True
    assert field(a, "has_entity") is True
    assert field(a, "score") == 0.25
    assert field(a, "tags") == ["a", "b"]
    assert a.start == 0.5
    assert a.duration == 1.5
    assert a.recording.sources[0].source == "/data/u1.wav"
    assert text(b) == "adiós ’n’ 日本"
    assert field(b, "speaker") is None
    assert origin(b) == "x.jsonl:2"
    assert [c.to_dict() for c in loaded] == [c.to_dict() for c in cuts]


def test_save_is_byte_reproducible(tmp_path: Path) -> None:
    cuts = [make_cut(f"u{i}", custom={ORIGIN: f"m:{i}", "k": i}) for i in range(5)]
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    save_cuts(cuts, a)
    save_cuts(iter(cuts), b)  # any iterable
    assert a.read_bytes() == b.read_bytes()
    with gzip.open(a, "rt", encoding="utf-8") as f:
        assert [json.loads(line)["id"] for line in f] == [f"u{i}" for i in range(5)]


# Regression: CutSet.from_file() on a .jsonl.gz is lazy, and None for an empty file.


def test_save_empty_and_load(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl.gz"
    assert save_cuts([], path) == 0
    assert list(load_cuts(path)) == []


def test_load_cuts_is_eager(tmp_path: Path) -> None:
    path = tmp_path / "cuts.jsonl.gz"
    save_cuts([make_cut("u1"), make_cut("u2")], path)
    loaded = load_cuts(path)
    assert not loaded.is_lazy
    assert loaded["u2"].id == "u2"  # random access by ID works on an eager CutSet only


def test_roundtrip_of_imported_nemo_cuts(nemo_corpus, tmp_path: Path) -> None:
    manifests = nemo_corpus()
    cuts = import_nemo(manifests["train"])
    path = tmp_path / "imported.jsonl.gz"
    save_cuts(cuts, path)
    loaded = list(load_cuts(path))
    assert [c.id for c in loaded] == [c.id for c in cuts]
    first = loaded[0]
    assert field(first, "speaker") == "a"
    assert field(first, "session") == "a_s0"
    assert field(first, "condition") == "clean"
    assert field(first, "has_entity") is True
    assert field(first, "code_switch") is False
    assert field(first, "utt_id") == "train-a-0"
    assert origin(first) == f"{manifests['train']}:1"
    assert origin(loaded[4]) == f"{manifests['train']}:5"
    assert field(first, SEGMENT) is None  # whole-file utterances carry no segment flag


def test_field_builtin_names() -> None:
    cut = make_cut("u1", duration=2.25, text="hola", speaker="ana", custom={"speaker": "other"})
    assert field(cut, "speaker") == "ana"  # the supervision's speaker, not a custom key
    assert field(cut, "text") == "hola"
    assert field(cut, "id") == "u1"
    assert field(cut, "duration") == 2.25


def test_field_custom_and_default() -> None:
    cut = make_cut("u1", custom={"condition": "clean", "has_entity": False, "n": 0})
    assert field(cut, "condition") == "clean"
    assert field(cut, "has_entity") is False  # falsy values are returned, not the default
    assert field(cut, "n", default=5) == 0
    assert field(cut, "missing") is None
    assert field(cut, "missing", default="dflt") == "dflt"


def test_field_without_custom() -> None:
    cut = make_cut("u1", custom=None)
    assert field(cut, "session") is None
    assert field(cut, "session", "x") == "x"
    assert origin(cut) == "u1"  # falls back to the cut ID


def test_text_of_missing_transcript_is_empty() -> None:
    cut = make_cut("u1", text=None)
    assert text(cut) == ""
    assert field(cut, "text") is None


@pytest.mark.parametrize("n_sups", [0, 2])
def test_supervision_requires_exactly_one(n_sups: int) -> None:
    cut = make_cut("odd", n_sups=n_sups)
    with pytest.raises(
        ValueError, match=rf"cut odd: expected exactly one supervision, got {n_sups}"
    ):
        supervision(cut)
    with pytest.raises(ValueError):
        field(cut, "speaker")
    with pytest.raises(ValueError):
        field(cut, "id")  # even fields of the cut itself: the cut breaks the conventions
    with pytest.raises(ValueError):
        text(cut)


def test_supervision_returns_the_one() -> None:
    cut = make_cut("u1")
    assert supervision(cut) is cut.supervisions[0]
