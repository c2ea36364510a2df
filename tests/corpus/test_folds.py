"""Leave-one-speaker-out folds of connected strings (asrflow.corpus.folds), on tiny WAVs."""

from __future__ import annotations

import doctest
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asrflow.corpus import folds
from asrflow.corpus.folds import FoldSettings, build_fold, string_lengths
from asrflow.errors import AsrflowError

SPEAKERS = ("george", "jackson", "lucas", "nicolas")
WORDS = ("zero", "one", "two", "three", "four")
TAKES = 25
"""Per speaker: 5 digits x 5 takes."""
FSDD = Path(__file__).resolve().parents[3] / "shared/corpora/fsdd4/all.jsonl"


@pytest.fixture(scope="module")
def takes(tmp_path_factory) -> Path:
    """A NeMo manifest of 4 speakers x 25 takes, each 0.1-0.3 s of a tone, 8 kHz 16-bit."""
    root = tmp_path_factory.mktemp("takes")
    (root / "recordings").mkdir()
    rng = np.random.default_rng(0)
    lines = []
    for speaker in SPEAKERS:
        for i in range(TAKES):
            n = int(rng.integers(800, 2400))
            tone = 0.3 * np.sin(np.arange(n) * (0.05 + 0.01 * i)).astype(np.float32)
            name = f"{i % 5}_{speaker}_{i // 5}"
            soundfile.write(root / f"recordings/{name}.wav", tone, 8000, subtype="PCM_16")
            lines.append(
                {
                    "audio_filepath": f"recordings/{name}.wav",
                    "duration": n / 8000,
                    "text": WORDS[i % 5],
                    "speaker": speaker,
                    "utt_id": name,
                }
            )
    (root / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return root / "all.jsonl"


def _rows(fold: folds.Fold, split: str) -> list[dict]:
    return [json.loads(line) for line in fold.manifests[split].read_text().splitlines()]


def _parts(fold: folds.Fold) -> dict[str, list[str]]:
    return json.loads((fold.dir / "parts.json").read_text())


@pytest.mark.parametrize("dev", ["takes", "speaker"])
def test_every_take_is_used_exactly_once_in_strings_of_3_to_7(takes, tmp_path, dev):
    fold = build_fold(takes, tmp_path / "fold", FoldSettings("lucas", dev=dev))
    parts = _parts(fold)
    used = Counter(t for ids in parts.values() for t in ids)
    assert set(used.values()) == {1}
    assert len(used) == TAKES * len(SPEAKERS)
    for split in folds.SPLITS:
        for row in _rows(fold, split):
            ids = parts[row["utt_id"]]
            assert 3 <= len(ids) <= 7
            assert row["text"].split() == [WORDS[int(t.split("_")[0])] for t in ids]
            assert all(f"_{row['speaker']}_" in t for t in ids)  # one speaker per string
    assert {r["speaker"] for r in _rows(fold, "test")} == {"lucas"}


def test_dev_takes_shares_the_training_speakers_with_about_12_percent(takes, tmp_path):
    fold = build_fold(takes, tmp_path / "fold", FoldSettings("nicolas", dev="takes"))
    train, dev = _rows(fold, "train"), _rows(fold, "dev")
    trained = {"george", "jackson", "lucas"}
    assert {r["speaker"] for r in train} == {r["speaker"] for r in dev} == trained
    split = fold.summary["splits"]
    assert split["dev"]["takes"] == 3 * round(0.12 * TAKES)
    assert split["train"]["takes"] == 3 * TAKES - split["dev"]["takes"]
    assert split["test"] == {**split["test"], "speakers": ["nicolas"], "takes": TAKES}


def test_dev_speaker_holds_out_the_next_speaker_whole(takes, tmp_path):
    for held_out, dev in [("george", "jackson"), ("nicolas", "george")]:
        fold = build_fold(takes, tmp_path / held_out, FoldSettings(held_out, dev="speaker"))
        by_split = {s: {r["speaker"] for r in _rows(fold, s)} for s in folds.SPLITS}
        assert by_split["dev"] == {dev} and by_split["test"] == {held_out}
        assert by_split["train"] == set(SPEAKERS) - {dev, held_out}
        assert fold.summary["splits"]["dev"]["takes"] == TAKES


def test_durations_are_the_wavs_and_paths_are_relative(takes, tmp_path):
    fold = build_fold(takes, tmp_path / "fold", FoldSettings("jackson"))
    original = {r["utt_id"]: r for r in map(json.loads, takes.read_text().splitlines())}
    parts = _parts(fold)
    for split in folds.SPLITS:
        for row in _rows(fold, split):
            info = soundfile.info(fold.dir / row["audio_filepath"])
            assert not Path(row["audio_filepath"]).is_absolute()
            assert info.samplerate == 8000 and info.subtype == "PCM_16" and info.channels == 1
            assert row["duration"] == pytest.approx(info.frames / 8000, abs=1e-6)
            takes_seconds = sum(original[t]["duration"] for t in parts[row["utt_id"]])
            pauses = (len(parts[row["utt_id"]]) - 1) * np.array([0.05, 0.3])
            assert takes_seconds + pauses[0] - 0.01 <= row["duration"]
            assert row["duration"] <= takes_seconds + pauses[1] + 0.01


def test_the_same_settings_give_the_same_bytes_and_are_not_rebuilt(takes, tmp_path):
    a = build_fold(takes, tmp_path / "a", FoldSettings("george", seed=3))
    b = build_fold(takes, tmp_path / "b", FoldSettings("george", seed=3))
    files = sorted(p.relative_to(a.dir) for p in a.dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b.dir) for p in b.dir.rglob("*") if p.is_file())
    assert all((a.dir / f).read_bytes() == (b.dir / f).read_bytes() for f in files)
    stamp = (a.dir / "train.jsonl").stat().st_mtime_ns
    build_fold(takes, tmp_path / "a", FoldSettings("george", seed=3))
    assert (a.dir / "train.jsonl").stat().st_mtime_ns == stamp
    c = build_fold(takes, tmp_path / "a", FoldSettings("george", seed=4))  # rebuilt in place
    assert json.loads((c.dir / "settings.json").read_text())["seed"] == 4
    assert (c.dir / "train.jsonl").read_text() != (b.dir / "train.jsonl").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no temp dir left


def test_room_fill_puts_the_takes_background_in_the_pauses(tmp_path):
    """With ``pause_fill: room`` a pause holds the takes' own quietest frames, not zeros; the
    strings, their takes and their lengths are those of ``zeros``."""
    root = tmp_path / "takes"
    (root / "recordings").mkdir(parents=True)
    rng = np.random.default_rng(1)
    lines = []
    for speaker in SPEAKERS:
        for i in range(TAKES):
            n = 1600
            audio = rng.normal(0, 0.003, n) + 0.3 * np.sin(np.arange(n) * 0.1) * (
                np.arange(n) >= 400
            )
            name = f"{i % 5}_{speaker}_{i // 5}"
            soundfile.write(root / f"recordings/{name}.wav", audio, 8000, subtype="PCM_16")
            row = {"audio_filepath": f"recordings/{name}.wav", "text": WORDS[i % 5]}
            lines.append({**row, "duration": 0.2, "speaker": speaker, "utt_id": name})
    (root / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    zeros = build_fold(root / "all.jsonl", tmp_path / "z", FoldSettings("george"))
    room = build_fold(root / "all.jsonl", tmp_path / "r", FoldSettings("george", pause_fill="room"))
    assert _parts(zeros) == _parts(room)
    for split in folds.SPLITS:
        for z, r in zip(_rows(zeros, split), _rows(room, split), strict=True):
            assert z == r  # same strings, same durations
            a, _ = soundfile.read(zeros.dir / z["audio_filepath"])
            b, _ = soundfile.read(room.dir / r["audio_filepath"])
            gap = slice(1600, 1600 + 400)  # inside the first pause (>= 0.05 s)
            assert (a[gap] == 0).all()
            assert 0.001 < np.sqrt(np.mean(b[gap] ** 2)) < 0.01  # the takes' hiss
    assert json.loads((room.dir / "settings.json").read_text())["pause_fill"] == "room"
    with pytest.raises(AsrflowError, match="pause_fill 'noise': expected one of zeros, room"):
        FoldSettings("george", pause_fill="noise")


def test_string_lengths_partition_exactly_or_say_why_not():
    rng = np.random.default_rng(1)
    for n in [0, 3, 7, 8, 11, 500]:
        lengths = string_lengths(n, (3, 7), rng)
        assert sum(lengths) == n and all(3 <= k <= 7 for k in lengths)
    for n in [1, 2]:
        with pytest.raises(AsrflowError, match=f"{n} takes cannot"):
            string_lengths(n, (3, 7), rng)
    with pytest.raises(AsrflowError, match="'bob' is not in the manifest"):
        folds.split_speakers(SPEAKERS, FoldSettings("bob"))
    with pytest.raises(AsrflowError, match="fold dev"):
        FoldSettings("george", dev="random")


def test_the_examples_hold():
    result = doctest.testmod(folds)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.skipif(not FSDD.is_file(), reason="../shared/corpora/fsdd4 not here")
def test_a_fold_of_the_shared_corpus_uses_all_2000_takes(tmp_path):
    fold = build_fold(FSDD, tmp_path / "nicolas", FoldSettings("nicolas", dev="speaker"))
    split = fold.summary["splits"]
    assert [split[s]["takes"] for s in folds.SPLITS] == [1000, 500, 500]
    assert split["dev"]["speakers"] == ["george"] and split["test"]["speakers"] == ["nicolas"]
    assert 100 <= split["test"]["utterances"] <= 167  # 500 takes in strings of 3-7


def test_selected_takes_name_their_audio_absolutely_and_none_kept_is_an_error(takes, tmp_path):
    two = set(SPEAKERS[:2])
    out = folds.select_takes(takes, tmp_path / "sub.jsonl", lambda r: r["speaker"] in two)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 * TAKES and {r["speaker"] for r in rows} == two
    assert all(Path(r["audio_filepath"]).is_absolute() for r in rows)
    assert all(Path(r["audio_filepath"]).is_file() for r in rows)
    # a fold is built from them beside neither the source nor its recordings
    fold = build_fold(out, tmp_path / "fold", FoldSettings(held_out=SPEAKERS[1], dev="takes"))
    assert fold.summary["splits"]["train"]["speakers"] == [SPEAKERS[0]]
    assert fold.summary["splits"]["test"]["speakers"] == [SPEAKERS[1]]
    with pytest.raises(AsrflowError, match=r"all\.jsonl: no takes of nobody"):
        folds.select_takes(takes, tmp_path / "none.jsonl", lambda r: False, what="takes of nobody")
    assert not (tmp_path / "none.jsonl").exists()
