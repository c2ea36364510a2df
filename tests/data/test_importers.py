import json
from pathlib import Path

import pytest

from asrflow.data.audio import read_audio_info
from asrflow.data.cuts import field, origin, save_cuts, text
from asrflow.data.importers import (
    import_kaldi,
    import_lhotse,
    import_manifest,
    import_nemo,
)
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


def _kaldi_dir(tmp_path: Path) -> Path:
    d = tmp_path / "kaldi"
    d.mkdir()
    write_wav(tmp_path / "r1.wav", 1.0)
    write_wav(tmp_path / "r2.wav", 1.5, seed=1)
    (d / "wav.scp").write_text(f"r1 {tmp_path / 'r1.wav'}\nr2 {tmp_path / 'r2.wav'}\n")
    (d / "text").write_text("r1 hello there\nr2 café au lait\n")
    return d


def test_nemo_manifest_that_is_not_utf8_names_line_and_column(nemo_corpus):
    """Issue 12, item 4: Latin-1 bytes crashed as "unexpected error (a bug)"."""
    manifest = nemo_corpus()["dev"]
    lines = manifest.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"hello', b'"h\xe9llo')  # Latin-1 e-acute
    manifest.write_bytes(b"".join(lines))
    column = lines[1].decode("latin-1").index("\xe9") + 1
    with pytest.raises(AsrflowError) as err:
        import_nemo(manifest)
    message = str(err.value)
    assert f"{manifest}:2: not UTF-8: byte 0xe9 at column {column}" in message
    assert "iconv" in message  # says what to do


def test_nemo_manifest_with_a_bom_is_read_with_a_warning(nemo_corpus, caplog):
    """Issue 12, item 5: a UTF-8 byte-order mark (Windows editors) is dropped, with a warning."""
    manifest = nemo_corpus()["dev"]
    plain = import_nemo(manifest)
    manifest.write_bytes(b"\xef\xbb\xbf" + manifest.read_bytes())
    with caplog.at_level("WARNING"):
        cuts = import_nemo(manifest)
    assert [c.to_dict() for c in cuts] == [c.to_dict() for c in plain]
    assert "byte-order mark" in caplog.text and str(manifest) in caplog.text


def test_nemo_json_error_names_the_column(nemo_corpus):
    manifest = nemo_corpus()["dev"]
    lines = manifest.read_text().splitlines()
    lines[2] = lines[2][:-1]  # no closing brace: named where the line ends (was column 1)
    manifest.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        AsrflowError,
        match=rf"{manifest}:3: not valid JSON at column {len(lines[2]) + 1}, the end of the line",
    ):
        import_nemo(manifest)
    lines[2] = lines[2].replace(": ", ":: ", 1) + "}"  # inside the line: its column
    manifest.write_text("\n".join(lines) + "\n")
    with pytest.raises(AsrflowError, match=rf"{manifest}:3: not valid JSON at column \d+ \("):
        import_nemo(manifest)


def test_kaldi_tables_with_a_bom_import_as_without(tmp_path):
    d = _kaldi_dir(tmp_path)
    plain = {c.id: text(c) for c in import_kaldi(d, sampling_rate=16000)}
    for name in ("wav.scp", "text"):
        (d / name).write_bytes(b"\xef\xbb\xbf" + (d / name).read_bytes())
    assert {c.id: text(c) for c in import_kaldi(d, sampling_rate=16000)} == plain
    assert (d / "text").read_bytes().startswith(b"\xef\xbb\xbf")  # the user's file untouched


def test_kaldi_text_that_is_not_utf8_names_line_and_column(tmp_path):
    d = _kaldi_dir(tmp_path)
    (d / "text").write_bytes("r1 hello there\nr2 café au lait\n".encode("latin-1"))
    with pytest.raises(AsrflowError, match=rf"{d / 'text'}:2: not UTF-8: byte 0xe9 at column 7"):
        import_kaldi(d, sampling_rate=16000)


def test_truncated_wav_keeps_what_its_header_declares(tmp_path):
    wav = write_wav(tmp_path / "a.wav", 1.0)
    assert read_audio_info(wav).header_samples is None
    wav.write_bytes(wav.read_bytes()[: 44 + 2 * 6000])
    info = read_audio_info(wav)
    assert (info.num_samples, info.header_samples) == (6000, 16000)


def test_nemo_negative_offset_is_refused_with_its_line(tmp_path):
    """Issue 30: it was imported as ID long--0000500 and reported by Lhotse's check as
    "start ... (got -0.5)"."""
    write_wav(tmp_path / "long.wav", 2.0)
    rows = [
        {"audio_filepath": "long.wav", "duration": 1.0, "offset": 0.5, "text": "a"},
        {"audio_filepath": "long.wav", "duration": 1.0, "offset": -0.5, "text": "b"},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(AsrflowError) as err:
        import_nemo(tmp_path / "m.jsonl")
    message = str(err.value)
    assert f"{tmp_path / 'm.jsonl'}:2: offset must not be negative (got -0.5)" in message
    assert "--0000500" not in message and ":1:" not in message


def test_zero_byte_audio_is_named_an_empty_file(nemo_corpus, tmp_path):
    """Issue 30: libsndfile's "Format not recognised" hid that the file was empty."""
    manifest = nemo_corpus()["dev"]
    (tmp_path / "corpus/audio/dev-d-1.wav").write_bytes(b"")
    with pytest.raises(AsrflowError) as err:
        import_nemo(manifest)
    assert f"{manifest}:2: audio {tmp_path / 'corpus/audio/dev-d-1.wav'} is an empty file " in (
        str(err.value)
    )
    assert "(0 bytes)" in str(err.value) and "Format not recognised" not in str(err.value)
    d = _kaldi_dir(tmp_path)
    (tmp_path / "r2.wav").write_bytes(b"")
    with pytest.raises(
        AsrflowError, match=r"wav.scp:2: audio .*r2.wav of recording r2 is an empty"
    ):
        import_kaldi(d, sampling_rate=16000)
