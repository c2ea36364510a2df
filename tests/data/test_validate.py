import json

import pytest

from asrflow.data.importers import import_nemo
from asrflow.data.validate import ValidationConfig, raise_on_errors, validate_splits
from asrflow.errors import ValidationFailed
from tests.conftest import write_wav


def load(manifests):
    return {split: import_nemo(path) for split, path in manifests.items()}


def codes(issues):
    return sorted({i.code for i in issues})


def test_clean_corpus_passes(nemo_corpus):
    report = validate_splits("c", load(nemo_corpus()))
    assert report.ok, report.to_text()
    assert report.splits["train"]["utterances"] == 9
    assert report.splits["train"]["sampling_rates"] == {"16000": 9}
    assert report.splits["dev"]["speakers"] == 1
    raise_on_errors(report)  # no error
    json.dumps(report.to_dict())  # serializable


@pytest.mark.parametrize(
    "mutate, code, split, line",
    [
        (lambda r: r["test"][1].update(text="   "), "empty_text", "test", 2),
        (
            lambda r: r["dev"][2].update(duration=r["dev"][2]["duration"] + 0.4),
            "duration_mismatch",
            "dev",
            3,
        ),
        (
            lambda r: r["train"][4].update(duration=r["train"][4]["duration"] - 0.3),
            "duration_mismatch",
            "train",
            5,
        ),
        (lambda r: r["train"][3].update(utt_id="train-a-0"), "duplicate_id", "train", 4),
        (lambda r: r["test"][0].update(speaker="a"), "group_in_two_splits", "test", 1),
        (lambda r: r["dev"][0].update(session="b_s1"), "group_in_two_splits", "dev", 1),
        (
            lambda r: r["test"][0].update(
                audio_filepath=r["train"][0]["audio_filepath"], duration=r["train"][0]["duration"]
            ),
            "audio_in_two_splits",
            "test",
            1,
        ),
        (lambda r: r["test"][2].update(offset=1.0), "segment_outside", "test", 3),
    ],
)
def test_each_planted_error_is_caught_and_names_the_line(nemo_corpus, mutate, code, split, line):
    manifests = nemo_corpus(mutate)
    report = validate_splits("c", load(manifests))
    assert code in codes(report.errors), report.to_text()
    with pytest.raises(ValidationFailed) as err:
        raise_on_errors(report)
    assert f"{manifests[split]}:{line}" in str(err.value)
    assert "->" in str(err.value)  # says what to do


def test_allowed_group_overlap(nemo_corpus):
    manifests = nemo_corpus(lambda r: r["test"][0].update(speaker="a"))
    config = ValidationConfig(allow_group_overlap=("speaker",))
    assert validate_splits("c", load(manifests), config).ok


def test_audio_that_vanished_after_import(nemo_corpus, tmp_path):
    splits = load(nemo_corpus())
    (tmp_path / "corpus/audio/dev-d-1.wav").unlink()
    report = validate_splits("c", splits)
    assert codes(report.errors) == ["audio_unreadable"]


def test_truncated_wav_is_caught_by_the_header_read(nemo_corpus, tmp_path):
    splits = load(nemo_corpus())
    wav = tmp_path / "corpus/audio/dev-d-2.wav"
    wav.write_bytes(wav.read_bytes()[:20000])
    assert codes(validate_splits("c", splits).errors) == ["duration_mismatch"]


def test_full_decode_catches_corrupt_compressed_audio(tmp_path):
    import soundfile

    audio = tmp_path / "corpus/a.flac"
    audio.parent.mkdir(parents=True)
    write_wav(tmp_path / "x.wav", 3.0)
    data, sr = soundfile.read(tmp_path / "x.wav", dtype="int16")
    soundfile.write(audio, data, sr, format="FLAC")
    row = {"audio_filepath": "a.flac", "duration": 3.0, "text": "x", "speaker": "s"}
    manifest = tmp_path / "corpus/train.jsonl"
    manifest.write_text(json.dumps(row) + "\n")
    splits = {"train": import_nemo(manifest)}
    raw = bytearray(audio.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 2000] = bytes(2000)
    audio.write_bytes(bytes(raw))
    assert validate_splits("c", splits).ok  # the header alone looks fine
    report = validate_splits("c", splits, ValidationConfig(full_decode=True))
    assert codes(report.errors) == ["audio_unreadable"]


def test_sampling_rate_recorded_and_checked(nemo_corpus, tmp_path):
    splits = load(nemo_corpus())
    write_wav(tmp_path / "corpus/audio/dev-d-0.wav", 1.0, sr=8000)
    report = validate_splits("c", splits)
    assert "sampling_rate" in codes(report.errors)
    assert report.splits["dev"]["sampling_rates"] == {"8000": 1, "16000": 2}


def test_convention_warnings(nemo_corpus):
    def mutate(r):
        r["train"][0]["text"] = "HELLO WORLD"
        r["train"][1]["text"] = "call me at 5"
        r["test"][1]["text"] = "hello señor"

    report = validate_splits("c", load(nemo_corpus(mutate)))
    assert report.ok
    assert codes(report.warnings) == ["digits_and_words", "mixed_case", "unseen_characters"]
    unseen = next(w for w in report.warnings if w.code == "unseen_characters")
    assert "'ñ'" in unseen.message and unseen.split == "test"
    assert "Warnings:" in report.to_text()


def test_many_errors_are_summarised(nemo_corpus):
    def mutate(r):
        for row in r["train"]:
            row["text"] = ""

    report = validate_splits("c", load(nemo_corpus(mutate)))
    with pytest.raises(ValidationFailed, match="9 error"):
        raise_on_errors(report, limit=3)
