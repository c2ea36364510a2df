"""Tests for asrflow.data.filter: one reason per removed cut, counts by slice, reports."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse import CutSet, MonoCut

from asrflow.data.filter import (
    REASONS,
    FilterConfig,
    filter_cuts,
    format_filter_report,
    removal_reason,
    write_filter_report,
)
from asrflow.errors import AsrflowError
from asrflow.text import TextNormalization
from tests.cuts import audio_less_cut

NORM = TextNormalization()


def make_cut(cid: str, duration: float, text: str, **custom) -> MonoCut:
    """An audio-less cut following asrflow's conventions."""
    speaker = custom.pop("speaker", "spk")
    return audio_less_cut(
        cid, duration, text, speaker=speaker, origin=f"train.jsonl:{cid}", **custom
    )


# One cut per outcome under the default config (0.3..30 s, 1..30 chars/s).
CASES = {
    "ok": (2.0, "hola qué tal", None),
    "short": (0.2, "sí", "too_short"),
    "long": (31.0, "palabras " * 50, "too_long"),
    "empty": (2.0, " ¿?... ", "empty_after_normalization"),
    "sparse": (5.0, "sí", "too_few_chars_per_second"),
    "dense": (1.0, "esta frase es demasiado larga para un segundo", "too_many_chars_per_second"),
    "short_and_empty": (0.1, "", "too_short"),  # first failing reason wins
    "long_and_dense": (40.0, "x" * 5000, "too_long"),
}


def case_cuts() -> list[MonoCut]:
    return [
        make_cut(cid, d, t, code_switch=(i % 2 == 0))
        for i, (cid, (d, t, _)) in enumerate(CASES.items())
    ]


def test_each_reason() -> None:
    kept, report = filter_cuts(CutSet.from_cuts(case_cuts()), FilterConfig(), NORM)
    assert [c.id for c in kept] == ["ok"]
    expected = {cid: reason for cid, (_, _, reason) in CASES.items() if reason}
    removed = {cid: reason for reason, ids in report["removed_ids"].items() for cid in ids}
    assert removed == expected
    assert set(report["removed_by_reason"]) == set(REASONS)
    for reason in REASONS:
        assert report["removed_by_reason"][reason] == sum(r == reason for r in expected.values())
    assert report["removed_ids"]["too_short"] == ["short", "short_and_empty"]


def test_bounds_inclusive() -> None:
    config = FilterConfig(
        min_duration=1.0, max_duration=2.0, min_chars_per_second=2, max_chars_per_second=4
    )
    assert removal_reason(1.0, "ab", config) == (None, 2.0)
    assert removal_reason(2.0, "abcdefgh", config) == (None, 4.0)
    assert removal_reason(2.0, "abc", config)[0] == "too_few_chars_per_second"
    assert removal_reason(2.0, "abcdefghi", config)[0] == "too_many_chars_per_second"
    assert removal_reason(0.0, "", FilterConfig(min_duration=0))[0] == "empty_after_normalization"


def test_rate_uses_normalized_text() -> None:
    # 2 s of "¡¡¡SÍ!!!   ..." is "sí": 1 char/s, kept at the inclusive bound; raw would be 7/s.
    cut = make_cut("a", 2.0, "¡¡¡SÍ!!!   ...")
    kept, report = filter_cuts([cut], FilterConfig(min_chars_per_second=1.0), NORM)
    assert len(kept) == 1
    kept, report = filter_cuts([cut], FilterConfig(min_chars_per_second=1.5), NORM)
    assert report["removed_ids"]["too_few_chars_per_second"] == ["a"]


def test_checks_can_be_disabled() -> None:
    off = FilterConfig(0.0, math.inf, 0.0, math.inf)
    cuts = [c for c in case_cuts() if c.id != "empty" and c.id != "short_and_empty"]
    kept, report = filter_cuts(cuts, off, NORM)
    assert report["removed"] == 0 and len(kept) == len(cuts)


def test_counts_by_slice() -> None:
    cuts = case_cuts()
    _, report = filter_cuts(cuts, FilterConfig(), NORM, slice_fields=("code_switch", "speaker"))
    removed = [c for c in cuts if CASES[c.id][2]]
    by_cs = report["removed_by_slice"]["code_switch"]
    assert by_cs == {
        "True": sum(c.supervisions[0].custom["code_switch"] for c in removed),
        "False": sum(not c.supervisions[0].custom["code_switch"] for c in removed),
    }
    assert report["removed_by_slice"]["speaker"] == {"spk": len(removed)}
    assert report["input_by_slice"]["code_switch"] == {"False": 4, "True": 4}
    # A missing field is its own slice, "None".
    _, report = filter_cuts(cuts, FilterConfig(), NORM, slice_fields=("condition",))
    assert report["removed_by_slice"]["condition"] == {"None": len(removed)}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.01, 60.0, allow_nan=False),
            st.text(alphabet=st.sampled_from(list("ab ¿?.")), max_size=200),
            st.booleans(),
        ),
        max_size=30,
    )
)
def test_kept_plus_removed_is_input(rows: list[tuple[float, str, bool]]) -> None:
    cuts = [make_cut(f"c{i}", d, t, code_switch=cs) for i, (d, t, cs) in enumerate(rows)]
    kept, report = filter_cuts(cuts, FilterConfig(), NORM, slice_fields=("code_switch",))
    assert report["input"] == len(cuts)
    assert report["kept"] + report["removed"] == report["input"] == len(cuts)
    assert len(kept) == report["kept"]
    assert sum(report["removed_by_reason"].values()) == report["removed"]
    assert sum(report["removed_by_slice"]["code_switch"].values()) == report["removed"]
    ids = [cid for ids in report["removed_ids"].values() for cid in ids]
    assert len(ids) == len(set(ids)) == report["removed"]
    assert set(ids).isdisjoint(c.id for c in kept)
    assert set(ids) | {c.id for c in kept} == {c.id for c in cuts}
    total = sum(c.duration for c in cuts)
    assert report["kept_seconds"] + report["removed_seconds"] == pytest.approx(total, abs=0.01)


def test_report_round_trip(tmp_path: Path) -> None:
    _, report = filter_cuts(
        case_cuts(),
        FilterConfig(max_chars_per_second=math.inf),
        NORM,
        slice_fields=("code_switch",),
    )
    json_path, txt_path = tmp_path / "filter.json", tmp_path / "filter.txt"
    write_filter_report(report, json_path, txt_path)
    loaded = json.loads(json_path.read_text(encoding="utf-8"))
    assert loaded == json.loads(json.dumps(report))
    assert loaded["config"]["max_chars_per_second"] == "inf"
    assert FilterConfig.from_dict(loaded["config"]) == FilterConfig(max_chars_per_second=math.inf)
    assert "Infinity" not in json_path.read_text(encoding="utf-8")
    text = txt_path.read_text(encoding="utf-8")
    assert text == format_filter_report(loaded)
    for reason in ("too_short", "too_long", "empty_after_normalization"):
        assert reason in text
    assert "train.jsonl:short" in text  # examples name the manifest line
    # Rewriting identical content keeps the files untouched.
    before = (json_path.stat().st_mtime_ns, txt_path.stat().st_mtime_ns)
    write_filter_report(report, json_path, txt_path)
    assert (json_path.stat().st_mtime_ns, txt_path.stat().st_mtime_ns) == before


def test_summary_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="asrflow.data.filter"):
        filter_cuts(case_cuts(), FilterConfig(), NORM)
    messages = " | ".join(r.getMessage() for r in caplog.records)
    assert "kept 1 of 8" in messages
    assert "too_short" in messages and "too_many_chars_per_second" in messages


def test_config_validation() -> None:
    assert FilterConfig.from_dict(None) == FilterConfig()
    assert FilterConfig.from_dict({"max_duration": "inf"}).max_duration == math.inf
    for bad in (
        {"min_duration": -1},
        {"min_duration": 5, "max_duration": 1},
        {"min_chars_per_second": 50},
        {"max_duration": "long"},
        {"max_duration": True},
        {"max_seconds": 10},
    ):
        with pytest.raises(AsrflowError):
            FilterConfig.from_dict(bad)


def test_a_long_transcript_is_shortened_in_the_text_report_only() -> None:
    """Issue 30: a 2,600-character transcript was printed whole in the text report."""
    transcript = "palabra " * 325
    _, report = filter_cuts([make_cut("long", 40.0, transcript)], FilterConfig(), NORM)
    text = format_filter_report(report)
    line = next(ln for ln in text.splitlines() if "train.jsonl:long" in ln)
    assert line.endswith(f"... ({len(transcript)} characters)") and len(line) < 250
    assert f"{transcript[:120]!r}" in line
    assert report["examples"]["too_long"][0]["text"] == transcript  # the JSON keeps it whole
