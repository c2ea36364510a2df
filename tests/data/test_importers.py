import json
from pathlib import Path

import pytest

from asrflow.data.cuts import field, origin, save_cuts, text
from asrflow.data.importers import import_kaldi, import_lhotse, import_manifest, import_nemo
from asrflow.errors import AsrflowError
from tests.conftest import write_wav


def test_nemo_import_keeps_fields_and_resolves_paths_against_manifest(
    nemo_corpus, tmp_path, monkeypatch
):
    manifests = nemo_corpus()
    monkeypatch.chdir(tmp_path.parent)  # the working directory must not matter
    cuts = import_nemo(manifests["train"])
    assert len(cuts) == 9
    cut = cuts[0]
    assert cut.id == "train-a-0"
    assert cut.recording.sources[0].source == str(tmp_path / "corpus/audio/train-a-0.wav")
    assert cut.sampling_rate == 16000
    assert cut.duration == pytest.approx(1.0)
    assert text(cut) == "hello a number zero"
    assert field(cut, "speaker") == "a"
    assert field(cut, "session") == "a_s0"
    assert field(cut, "condition") == "clean"
    assert field(cut, "has_entity") is True
    assert origin(cut) == f"{manifests['train']}:1"


def test_nemo_import_collects_every_bad_line(nemo_corpus):
    def break_lines(rows):
        rows["train"][1]["audio_filepath"] = "audio/missing.wav"
        del rows["train"][2]["text"]

    manifest = nemo_corpus(break_lines)["train"]
    with manifest.open("a") as f:
        f.write("{not json\n")
    with pytest.raises(AsrflowError) as err:
        import_nemo(manifest)
    msg = str(err.value)
    assert f"{manifest}:3: missing key(s) text" in msg
    assert f"{manifest}:10: not valid JSON" in msg


def test_nemo_import_names_missing_audio_line(nemo_corpus):
    manifest = nemo_corpus(lambda rows: rows["dev"][1].update(audio_filepath="gone.wav"))["dev"]
    with pytest.raises(AsrflowError, match=rf"{manifest}:2: audio .*gone.wav does not exist"):
        import_nemo(manifest)


def test_nemo_ids_without_utt_id_come_from_file_and_offset(tmp_path):
    write_wav(tmp_path / "long.wav", 4.0)
    rows = [
        {"audio_filepath": "long.wav", "duration": 1.0, "offset": 0.5, "text": "a"},
        {"audio_filepath": "long.wav", "duration": 1.0, "offset": 2.0, "text": "b"},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cuts = import_nemo(tmp_path / "m.jsonl")
    assert [c.id for c in cuts] == ["long-00000500", "long-00002000"]
    assert cuts[1].start == 2.0 and field(cuts[1], "segment") is True


def test_kaldi_import_names_text_lines(tmp_path):
    d = tmp_path / "kaldi"
    d.mkdir()
    write_wav(tmp_path / "r1.wav", 3.0)
    write_wav(tmp_path / "r2.wav", 2.0, seed=1)
    (d / "wav.scp").write_text(f"r1 {tmp_path / 'r1.wav'}\nr2 {tmp_path / 'r2.wav'}\n")
    (d / "segments").write_text("u1 r1 0.0 1.5\nu2 r1 1.5 3.0\nu3 r2 0.0 2.0\n")
    (d / "text").write_text("u1 hello there\nu2 general kenobi\nu3 you are a bold one\n")
    (d / "utt2spk").write_text("u1 s1\nu2 s1\nu3 s2\n")
    cuts = import_kaldi(d, sampling_rate=16000)
    by_id = {c.id: c for c in cuts}
    assert set(by_id) == {"u1", "u2", "u3"}
    assert text(by_id["u2"]) == "general kenobi"
    assert field(by_id["u3"], "speaker") == "s2"
    assert origin(by_id["u3"]) == f"{d / 'text'}:3"
    assert by_id["u2"].start == pytest.approx(1.5)


def test_kaldi_import_rejects_missing_audio(tmp_path):
    d = tmp_path / "kaldi"
    d.mkdir()
    write_wav(tmp_path / "r1.wav", 1.0)
    (d / "wav.scp").write_text(f"r1 {tmp_path / 'r1.wav'}\nr2 {tmp_path / 'nope.wav'}\n")
    (d / "text").write_text("r1 hi\nr2 ho\n")
    with pytest.raises(
        AsrflowError, match=r"wav.scp:2: audio .*nope.wav of recording r2 does not exist"
    ):
        import_kaldi(d, sampling_rate=16000)


def test_lhotse_round_trip(nemo_corpus, tmp_path):
    cuts = import_nemo(nemo_corpus()["dev"])
    save_cuts(cuts, tmp_path / "dev.jsonl.gz")
    again = import_lhotse(tmp_path / "dev.jsonl.gz")
    assert [c.id for c in again] == [c.id for c in cuts]
    assert [text(c) for c in again] == [text(c) for c in cuts]
    assert field(again[0], "condition") == "clean"
    assert origin(again[1]) == f"{tmp_path / 'dev.jsonl.gz'}:2"


def test_unknown_format():
    with pytest.raises(AsrflowError, match="unknown manifest format"):
        import_manifest("csv", Path("x"))
