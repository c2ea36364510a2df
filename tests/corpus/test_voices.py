"""asrflow.corpus.voices: digits spoken by many synthetic voices, as a takes manifest that the
fold builder joins into strings."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from asrflow.corpus.connected import read_takes
from asrflow.corpus.folds import FoldSettings, build_fold
from asrflow.corpus.voices import VoiceSettings, speak_takes
from asrflow.errors import AsrflowError

SMALL = VoiceSettings(speakers=4, takes=2, words=("one", "two", "three"), seed=3)


@pytest.fixture(scope="module")
def takes(tmp_path_factory):
    return speak_takes(tmp_path_factory.mktemp("voices") / "takes", SMALL)


def test_every_speaker_says_every_word_in_its_own_voice_and_channel(takes):
    rows = [json.loads(line) for line in takes.read_text().splitlines()]
    assert len(rows) == 4 * 2 * 3
    assert {r["speaker"] for r in rows} == {"voice000", "voice001", "voice002", "voice003"}
    assert {r["text"] for r in rows} == {"one", "two", "three"}
    voices = {r["speaker"]: r["voice"] for r in rows}
    assert all(r["voice"] == voices[r["speaker"]] for r in rows)  # one voice per speaker
    levels = []
    for r in rows:
        audio, rate = soundfile.read(takes.parent / r["audio_filepath"])
        assert rate == 8000
        assert r["duration"] == pytest.approx(len(audio) / rate, abs=1e-4)
        assert 0.1 < r["duration"] < 1.5  # one word, eSpeak's silence trimmed
        assert np.abs(audio).max() <= 1.0
        levels.append(np.abs(audio).max())
    assert max(levels) - min(levels) > 0.1  # levels differ between takes


def test_the_same_settings_write_the_same_bytes_and_skip_the_work(takes, tmp_path):
    again = speak_takes(tmp_path / "again", SMALL)
    assert again.read_text() == takes.read_text()
    first = next(iter(sorted((takes.parent / "recordings").iterdir())))
    assert (again.parent / "recordings" / first.name).read_bytes() == first.read_bytes()
    stamp = again.stat().st_mtime_ns
    assert speak_takes(tmp_path / "again", SMALL) == again
    assert again.stat().st_mtime_ns == stamp  # not rewritten
    other = speak_takes(tmp_path / "again", VoiceSettings(**{**SMALL.__dict__, "seed": 4}))
    assert other.read_text() != takes.read_text()


def test_the_fold_builder_joins_the_takes_into_strings(takes, tmp_path):
    assert set(read_takes(takes)) == {"voice000", "voice001", "voice002", "voice003"}
    fold = build_fold(
        takes, tmp_path / "fold", FoldSettings(held_out="voice000", words=(2, 3), dev_fraction=0.34)
    )
    train = [json.loads(line) for line in fold.manifests["train"].read_text().splitlines()]
    assert {r["speaker"] for r in train} == {"voice001", "voice002", "voice003"}
    assert all(2 <= len(r["text"].split()) <= 3 for r in train)


def test_settings_that_cannot_make_takes_are_refused():
    with pytest.raises(AsrflowError, match="at least 1"):
        VoiceSettings(speakers=0)
    with pytest.raises(AsrflowError, match="backwards"):
        VoiceSettings(snr_db=(30.0, 20.0))
