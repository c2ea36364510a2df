"""Connected recordings joined from real isolated takes (../shared/corpora/fsdd4)."""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pytest

from asrflow.corpus import connected as connected_module
from asrflow.corpus.connected import (
    Recording,
    connected,
    fill_with,
    join,
    read_takes,
    room_tone,
    until,
)
from asrflow.errors import AsrflowError

FSDD = Path(__file__).resolve().parents[3] / "shared/corpora/fsdd4/all.jsonl"
needs_fsdd = pytest.mark.skipif(not FSDD.is_file(), reason="../shared/corpora/fsdd4 not here")


@needs_fsdd
def test_takes_of_four_speakers_and_strings_of_one_speaker():
    takes = read_takes(FSDD)
    assert sorted(takes) == ["george", "jackson", "lucas", "nicolas"]
    assert all(len(t) == 500 for t in takes.values())
    rng = np.random.default_rng(0)
    strings = connected(takes["lucas"], rng, words=(3, 5), sample_rate=8000, count=4)
    for s in strings:
        assert 3 <= len(s.text.split()) <= 5 and len(s.parts) == len(s.text.split())
        assert all("_lucas_" in p for p in s.parts)
        assert s.audio.dtype == np.float32 and 0.3 < len(s.audio) / 8000 < 15


def test_join_puts_pauses_between_parts_and_keeps_their_order():
    a = Recording(np.ones(100, np.float32), "one", ["a"])
    b = Recording(np.full(50, 2, np.float32), "two", ["b"])
    out = join([a, b], np.random.default_rng(0), sample_rate=1000, pause=(0.1, 0.1))
    assert out.text == "one two" and out.parts == ["a", "b"]
    assert len(out.audio) == 100 + 100 + 50
    assert (out.audio[100:200] == 0).all() and out.audio[-1] == 2


def test_room_tone_is_the_quietest_frames_and_fills_a_pause_at_their_level():
    rng = np.random.default_rng(0)
    hiss = rng.normal(0, 0.002, 800).astype(np.float32)  # 0.1 s of background at 8 kHz
    word = 0.3 * np.sin(np.arange(3200) * 0.2).astype(np.float32)
    tone = room_tone([np.r_[hiss, word + hiss[0], hiss], word], 8000)
    assert tone.shape[1] == 160 and np.abs(tone).max() < 0.02  # no frame of the words
    pause = fill_with(tone, 2000, rng)
    assert pause.dtype == np.float32 and len(pause) == 2000
    assert np.sqrt(np.mean(pause**2)) == pytest.approx(0.002, rel=0.15)  # the room's level
    # no click where frames meet: neighbouring samples differ as much as the hiss's do
    assert np.abs(np.diff(pause)).max() < 6 * np.abs(np.diff(hiss)).std() + 0.01
    assert len(fill_with(tone, 0, rng)) == 0
    filled = join(
        [Recording(word, "a", ["a"]), Recording(word, "b", ["b"])],
        rng,
        sample_rate=8000,
        pause=(0.1, 0.1),
        fill=lambda n: fill_with(tone, n, rng),
    )
    assert 0 < np.abs(filled.audio[3200:4000]).max() < 0.02
    with pytest.raises(AsrflowError, match="no recording holds one 20-ms frame"):
        room_tone([np.zeros(10, np.float32)], 8000)
    assert doctest.testmod(connected_module).failed == 0


def test_until_takes_pieces_up_to_a_length():
    pieces = [Recording(np.zeros(1000, np.float32), str(i), [str(i)]) for i in range(10)]
    assert len(until(pieces, 2.5, 1000)) == 3
    assert len(until(pieces, 100, 1000)) == 10


def test_a_bad_manifest_line_is_named(tmp_path):
    manifest = tmp_path / "all.jsonl"
    manifest.write_text('{"audio_filepath": "a.wav", "text": "one"}\n{"text": "two"}\n')
    with pytest.raises(AsrflowError, match=r"all\.jsonl:2"):
        read_takes(manifest)
    with pytest.raises(AsrflowError, match="no takes"):
        connected([], np.random.default_rng(0), words=(1, 2), sample_rate=8000, count=1)
