import json

import pytest

from asrflow.data.importers import import_nemo
from asrflow.data.issues import ValidationConfig
from asrflow.data.validate import raise_on_errors, validate_splits
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


def test_a_dev_of_training_speakers_warns_first_and_leaves_the_report_passing(nemo_corpus):
    """Issue 31, item 2: held-out takes of the training speakers as dev, new speakers in test."""
    speakers = {"train": ["a", "b", "c"], "dev": ["a", "b"], "test": ["e"]}
    # a repeated line: a warning of an earlier check, which must not hide this one
    splits = load(nemo_corpus(_same_audio(3, text="Hello a number zero"), speakers))
    config = ValidationConfig(allow_group_overlap=("speaker", "session"))
    report = validate_splits("c", splits, config)
    assert report.ok and [i.code for i in report.warnings] == ["audio_repeated", "dev_seen_groups"]
    data = report.to_dict()
    assert data["dev_groups"]["field"] == "speaker" and data["dev_groups"]["shared"] == 2
    assert data["groups"]["test"] == {"speaker": ["e"], "session": ["e_s0", "e_s1"]}
    text = report.to_text(limit=1)
    warnings = text.split("Warnings:\n", 1)[1].splitlines()
    assert warnings[1] == "  ... and 1 more (see the JSON report)"
    assert warnings[0].startswith("  dev [dev] speakers: dev measures seen speakers only")
    assert "in corpora.c" in warnings[0] and "check_dev_groups" in text
    # all speakers everywhere (speaker-dependent on purpose): no test set of new speakers
    same = {"train": ["a", "b"], "dev": ["a", "b"], "test": ["a", "b"]}
    report = validate_splits("c", load(nemo_corpus(speakers=same)), config)
    assert report.ok and report.warnings == [] and report.to_dict()["dev_groups"] is None


def test_audio_that_vanished_after_import(nemo_corpus, tmp_path):
    splits = load(nemo_corpus())
    (tmp_path / "corpus/audio/dev-d-1.wav").unlink()
    report = validate_splits("c", splits)
    assert codes(report.errors) == ["audio_unreadable"]


def test_audio_emptied_after_import_is_named_an_empty_file(nemo_corpus, tmp_path):
    splits = load(nemo_corpus())
    (tmp_path / "corpus/audio/dev-d-1.wav").write_bytes(b"")
    (issue,) = validate_splits("c", splits).errors
    assert issue.code == "audio_unreadable"
    assert issue.message.endswith(
        "dev-d-1.wav is an empty file (0 bytes): copy it again from its source"
    )


def test_truncated_wav_is_caught_by_the_header_read(nemo_corpus, tmp_path):
    splits = load(nemo_corpus())
    wav = tmp_path / "corpus/audio/dev-d-2.wav"
    wav.write_bytes(wav.read_bytes()[:20000])
    assert codes(validate_splits("c", splits).errors) == ["audio_truncated"]


@pytest.mark.parametrize("full_decode", [False, True])
def test_truncated_wav_fails_whatever_the_manifest_says(nemo_corpus, tmp_path, full_decode):
    """Issue 12, item 1: with the manifest's duration set to what is left, it used to pass."""
    left = (20000 - 44) // 2

    def mutate(rows):
        wav = tmp_path / "corpus/audio/dev-d-2.wav"
        wav.write_bytes(wav.read_bytes()[: 44 + 2 * left])
        rows["dev"][2]["duration"] = left / 16000

    manifests = nemo_corpus(mutate)
    report = validate_splits("c", load(manifests), ValidationConfig(full_decode=full_decode))
    assert codes(report.errors) == ["audio_truncated"], report.to_text()
    (issue,) = report.errors
    assert issue.where == f"{manifests['dev']}:3"
    assert f"header says {round(1.5 * 16000)} frames, the file holds {left}" in issue.message
    assert "copy it again" in issue.hint and "manifest" in issue.hint


def test_header_only_wav_blames_the_file_not_the_line(nemo_corpus, tmp_path):
    """Issue 12, item 10: a header-only WAV said "fix the manifest line"."""

    def mutate(rows):
        wav = tmp_path / "corpus/audio/test-e-0.wav"
        data = bytearray(wav.read_bytes()[:44])
        data[4:8] = (36).to_bytes(4, "little")  # RIFF size of a file with no samples
        data[40:44] = bytes(4)  # data chunk of 0 bytes: a consistent, empty file
        wav.write_bytes(bytes(data))

    manifests = nemo_corpus(mutate)
    report = validate_splits("c", load(manifests))
    assert codes(report.errors) == ["audio_empty"], report.to_text()
    assert "not the manifest line" in report.errors[0].hint


def test_empty_split_names_its_manifest(nemo_corpus):
    """Issue 30: the message named the split, not the file to fix."""
    manifests = nemo_corpus()
    manifests["test"].write_text("\n")
    report = validate_splits(
        "c", load(manifests), manifests={s: str(p) for s, p in manifests.items()}
    )
    (issue,) = report.errors
    assert issue.format().startswith(f"{manifests['test']} [test] split test: split 'test' has 0")
    assert f"is {manifests['test']} empty, or every line blank?" in issue.hint


def test_empty_split_is_an_error_naming_it(nemo_corpus):
    """Issue 12, item 3: an empty test.jsonl passed with "0 utterances"."""
    manifests = nemo_corpus()
    manifests["test"].write_text("")
    report = validate_splits("c", load(manifests))
    assert codes(report.errors) == ["empty_split"]
    with pytest.raises(ValidationFailed, match="split 'test' has 0 utterances"):
        raise_on_errors(report)


def _resampled(tmp_path, name: str, rate: int) -> None:
    wav = tmp_path / "corpus/audio" / name
    import soundfile

    seconds = soundfile.info(wav).duration
    write_wav(wav, seconds, sr=rate)


def test_declared_rate_is_enforced_for_a_nemo_corpus(nemo_corpus, tmp_path):
    """Issue 12, item 2: an 8 kHz file in a NeMo corpus declared 16 kHz passed silently."""
    manifests = nemo_corpus(lambda rows: _resampled(tmp_path, "train-b-1.wav", 8000))
    splits = load(manifests)
    report = validate_splits("c", splits, sampling_rate=16000)
    assert codes(report.errors) == ["sampling_rate"], report.to_text()
    (issue,) = report.errors
    assert issue.where == f"{manifests['train']}:5"
    assert "is 8000 Hz but corpora.c.sampling_rate declares 16000 Hz" in issue.message
    assert "sox" in issue.hint
    assert report.to_dict()["sampling_rates"]["found"] == {"8000": 1, "16000": 14}


def test_undeclared_mixed_rates_warn_with_counts_and_say_what_the_model_expects(
    nemo_corpus, tmp_path
):
    manifests = nemo_corpus(lambda rows: _resampled(tmp_path, "train-b-1.wav", 8000))
    report = validate_splits("c", load(manifests), model_rates={"big": 16000})
    assert report.ok
    (warning,) = [w for w in report.warnings if w.code == "mixed_sampling_rates"]
    assert "8000 Hz: 1" in warning.message and "16000 Hz: 14" in warning.message
    assert "resampled when loaded to the rate the model's frontend expects (big: 16000 Hz)" in (
        warning.hint
    )
    assert "declared: none" in report.to_text()
    assert "big: 16000 Hz" in report.to_text()


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


def test_kaldi_rate_mismatch_hint_points_at_the_declared_rate(tmp_path):
    """Issue 12, item 10: the hint said "re-import", which changes nothing."""
    from asrflow.data.importers import import_kaldi

    d = tmp_path / "kaldi"
    d.mkdir()
    write_wav(tmp_path / "r1.wav", 1.0, sr=8000)
    (d / "wav.scp").write_text(f"r1 {tmp_path / 'r1.wav'}\n")
    (d / "text").write_text("r1 hello\n")
    report = validate_splits("calls", {"train": import_kaldi(d, sampling_rate=16000)})
    (issue,) = [i for i in report.errors if i.code == "sampling_rate"]
    assert "is 8000 Hz but the manifest reads it as 16000 Hz" in issue.message
    assert "declare corpora.calls.sampling_rate: 8000" in issue.hint
    assert "re-import" not in issue.hint


def _same_audio(second: int, text: str | None = None):
    """Mutation: train line ``second`` (0-based) reads train line 1's audio, under its own ID."""

    def mutate(rows):
        first, other = rows["train"][0], rows["train"][second]
        other.update(audio_filepath=first["audio_filepath"], duration=first["duration"])
        if text is not None:
            other["text"] = text

    return mutate


def test_one_audio_under_two_ids_with_two_transcripts_is_an_error(nemo_corpus):
    """Issue 30: the leakage check looked only across splits; inside one it passed."""
    manifests = nemo_corpus(_same_audio(3))
    report = validate_splits("c", load(manifests))
    (issue,) = [i for i in report.errors if i.code == "audio_two_ids"]
    train = manifests["train"]
    assert issue.where == f"{train}:4" and issue.item == "utterance train-b-0"
    assert f"is also utterance train-a-0 ({train}:1), with another transcript" in issue.message
    assert "'hello b number zero' here, 'hello a number zero' there" in issue.message


def test_one_audio_under_two_ids_with_one_transcript_warns(nemo_corpus):
    manifests = nemo_corpus(_same_audio(3, text="Hello a number zero"))
    report = validate_splits("c", load(manifests))
    assert report.ok, report.to_text()
    (issue,) = [i for i in report.warnings if i.code == "audio_repeated"]
    assert issue.where == f"{manifests['train']}:4"
    assert "is also utterance train-a-0" in issue.message and "same transcript" in issue.message


def test_segments_of_one_file_are_not_the_same_audio(tmp_path):
    write_wav(tmp_path / "long.wav", 3.0)
    rows = [
        {"audio_filepath": "long.wav", "duration": 1.0, "offset": k * 1.0, "text": "same"}
        for k in range(3)
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = validate_splits("c", {"train": import_nemo(tmp_path / "m.jsonl")})
    assert not {i.code for i in report.errors + report.warnings} & {
        "audio_two_ids",
        "audio_repeated",
    }
