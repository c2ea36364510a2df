"""Lhotse Shar shards of a split (asrflow.data.shards): written whole, byte-reproducible, the
same audio and fields as the manifest, and every cut findable."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from lhotse import CutSet

from asrflow.cli import main as asrflow_main
from asrflow.data import shards as shards_module
from asrflow.data.cuts import load_cuts, make_cut, save_cuts
from asrflow.data.shards import (
    INDEX,
    ShardSettings,
    find_cut,
    iter_shard_ids,
    read_index,
    shard_fields,
    write_shards,
)
from asrflow.errors import AsrflowError
from tests.conftest import write_wav

N = 7


@pytest.fixture
def split(tmp_path: Path) -> Path:
    """A filtered split of N cuts (16-bit WAVs of different lengths) with custom fields."""
    cuts = []
    for i in range(N):
        seconds = 0.5 + 0.1 * i
        wav = write_wav(tmp_path / "audio" / f"utt{i}.wav", seconds, seed=i)
        cuts.append(
            make_cut(
                utt_id=f"utt{i}",
                audio=str(wav),
                sampling_rate=16000,
                num_samples=round(seconds * 16000),
                duration=round(seconds * 16000) / 16000,
                text=f"word {i}",
                speaker=f"spk{i % 2}",
                custom={"origin": f"train.jsonl:{i + 1}", "condition": "noisy" if i % 2 else ""},
            )
        )
    path = tmp_path / "filtered" / "train.jsonl.gz"
    save_cuts(cuts, path)
    return path


@pytest.mark.parametrize("audio_format", ["flac", "wav"])
def test_shards_hold_the_same_cuts_audio_and_fields_in_order(split, tmp_path, audio_format):
    out = tmp_path / "shards"
    index = write_shards(split, out, ShardSettings(shard_size=3, audio_format=audio_format))
    assert [s["num_cuts"] for s in index["shards"]] == [3, 3, 1]
    assert index["num_cuts"] == N and index["audio_format"] == audio_format
    assert json.loads((out / INDEX).read_text()) == index
    original = load_cuts(split)
    back = CutSet.from_shar(
        fields={k: [f[k] for f in shard_fields(out)] for k in ("cuts", "recording")}
    )
    for a, b in zip(original, back, strict=True):
        assert a.id == b.id and a.duration == b.duration
        assert a.supervisions[0].text == b.supervisions[0].text
        assert a.supervisions[0].custom == b.supervisions[0].custom
        assert a.supervisions[0].speaker == b.supervisions[0].speaker
        assert np.array_equal(a.load_audio(), b.load_audio())  # 16-bit sources: lossless
    total = sum(c.duration for c in original)
    assert index["seconds"] == pytest.approx(total, abs=1e-3)


def test_shards_are_byte_reproducible_and_a_rewrite_of_the_same_keeps_mtimes(split, tmp_path):
    settings = ShardSettings(shard_size=4)
    a, b = tmp_path / "a", tmp_path / "b"
    write_shards(split, a, settings)
    write_shards(split, b, settings)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if name != INDEX:  # the index names its source path, which is the same here too
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for p in a.glob("cuts.*.jsonl.gz"):  # a fixed gzip header: no time stamp
        assert p.read_bytes()[4:8] == b"\0\0\0\0"
    mtimes = {p.name: p.stat().st_mtime_ns for p in a.iterdir()}
    write_shards(split, a, settings)
    assert {p.name: p.stat().st_mtime_ns for p in a.iterdir()} == mtimes
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failed_write_leaves_the_old_shards_and_no_temporary_directory(
    split, tmp_path, monkeypatch
):
    out = tmp_path / "shards"
    write_shards(split, out, ShardSettings(shard_size=4))
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shards_module, "_stable_gzip", fail)
    with pytest.raises(AsrflowError, match=r"could not be written whole.*keeps the shards"):
        write_shards(split, out, ShardSettings(shard_size=2))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_every_cut_is_found_at_its_shard_and_position(split, tmp_path, capsys):
    out = tmp_path / "shards"
    write_shards(split, out, ShardSettings(shard_size=3))
    ids = list(iter_shard_ids(out))
    assert [cut_id for _, _, cut_id in ids] == [f"utt{i}" for i in range(N)]
    found = find_cut(out, "utt4")
    assert (found["shard"], found["position"]) == (1, 1)
    assert found["cuts"].endswith("cuts.000001.jsonl.gz") and found["member"] == "utt4.flac"
    with gzip.open(found["cuts"], "rt") as f:
        assert json.loads(f.readlines()[found["position"]])["id"] == "utt4"
    with pytest.raises(AsrflowError, match=r"no shard .* holds a cut 'nope'"):
        find_cut(out, "nope")
    assert asrflow_main(["where", str(out), "utt6", "utt0"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("utt6: shard 2 position 0: ") and "line 1" in printed[0]
    assert printed[1].startswith("utt0: shard 0 position 0: ")
    assert asrflow_main(["where", str(out), "utt1", "nope"]) == 1
    assert "nope: not found" in capsys.readouterr().out


def test_an_incomplete_shard_directory_is_named(split, tmp_path):
    out = tmp_path / "shards"
    write_shards(split, out, ShardSettings(shard_size=3))
    (out / "recording.000001.tar").unlink()
    with pytest.raises(AsrflowError, match=r"recording\.000001\.tar is missing.*rerun"):
        read_index(out)
    (out / INDEX).unlink()
    with pytest.raises(AsrflowError, match=r"no shards\.json"):
        read_index(out)


def test_an_empty_split_and_bad_settings_are_refused(tmp_path):
    empty = tmp_path / "empty.jsonl.gz"
    save_cuts([], empty)
    with pytest.raises(AsrflowError, match="no cuts to shard"):
        write_shards(empty, tmp_path / "out", ShardSettings())
    with pytest.raises(AsrflowError, match="shard_size must be at least 1"):
        ShardSettings(shard_size=0)
    with pytest.raises(AsrflowError, match="audio_format must be one of flac, wav"):
        ShardSettings(audio_format="mp3")
    assert ShardSettings.from_config({"shard_size": 5}) == ShardSettings(5, "flac")
