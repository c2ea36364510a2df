"""Issue 30: every line of every table of a Kaldi data dir is accounted for, or named."""

from pathlib import Path

import pytest

from asrflow.data.cuts import field, origin, text
from asrflow.data.importers import import_kaldi
from asrflow.errors import AsrflowError
from tests.conftest import write_wav


def kaldi_dir(tmp_path: Path, **tables: str) -> Path:
    """A data dir over two files (r1 3 s, r2 2 s) whose tables are ``tables`` (``{a}``/``{b}``
    stand for the two audio paths); wav.scp lists both files unless given."""
    d = tmp_path / "kaldi"
    d.mkdir(parents=True)
    a, b = write_wav(tmp_path / "r1.wav", 3.0), write_wav(tmp_path / "r2.wav", 2.0, seed=1)
    tables.setdefault("wav.scp", "r1 {a}\nr2 {b}\n")
    for name, body in tables.items():
        (d / name).write_text(body.format(a=a, b=b))
    return d


def refusal(d: Path) -> str:
    with pytest.raises(AsrflowError) as err:
        import_kaldi(d, sampling_rate=16000)
    message = str(err.value)
    assert "validate_data_dir.sh" in message  # says what to do
    return message


def test_a_recording_listed_twice_in_wav_scp_names_both_lines(tmp_path):
    """The last line won: r1's cut got r2's audio under r1's transcript, and validation passed."""
    d = kaldi_dir(tmp_path, **{"wav.scp": "r1 {a}\nr2 {b}\nr1 {b}\n"}, text="r1 a\nr2 b\n")
    message = refusal(d)
    assert f"{d / 'wav.scp'}:3: recording r1 is listed twice in wav.scp, at lines 1 and 3" in (
        message
    )


def test_utt2spk_missing_a_line_is_named(tmp_path):
    """An AssertionError (no segments) or KeyError (segments) before."""
    d = kaldi_dir(tmp_path, text="r1 a\nr2 b\n", utt2spk="r1 s\n")
    assert f"{d / 'wav.scp'}:2: recording r2 has no line in utt2spk" in refusal(d)


def test_utt2spk_missing_a_segment_is_named(tmp_path):
    d = kaldi_dir(
        tmp_path, segments="u1 r1 0 1\nu2 r2 0 1\n", text="u1 a\nu2 b\n", utt2spk="u1 s\n"
    )
    assert f"{d / 'segments'}:2: segment u2 has no line in utt2spk" in refusal(d)


def test_a_segment_without_text_is_named(tmp_path):
    """A KeyError before."""
    d = kaldi_dir(tmp_path, segments="u1 r1 0 1\nu2 r2 0 1\n", text="u1 a\n")
    assert f"{d / 'segments'}:2: segment u2 has no line in text" in refusal(d)


def test_a_recording_without_text_is_named(tmp_path):
    d = kaldi_dir(tmp_path, text="r1 a\n", utt2spk="r1 s\nr2 s\n")
    assert f"{d / 'wav.scp'}:2: recording r2 has no line in text" in refusal(d)


def test_a_segment_of_an_unknown_recording_is_named(tmp_path):
    """It was dropped without a word (35 of 36 kept)."""
    d = kaldi_dir(tmp_path, segments="u1 r1 0 1\nu2 r9 0 1\n", text="u1 a\nu2 b\n")
    message = refusal(d)
    assert f"{d / 'segments'}:2: segment u2 names recording r9, which wav.scp does not list" in (
        message
    )
    assert "text:2" not in message  # the segment is the line at fault, not its transcript


def test_text_lines_without_a_segment_or_recording_are_named(tmp_path):
    """Dropped without a word before (34 of 36 kept; a text line with no recording ignored)."""
    d = kaldi_dir(tmp_path, segments="u1 r1 0 1\n", text="u1 a\nu2 b\n")
    assert f"{d / 'text'}:2: utterance u2 has no segment in segments" in refusal(d)
    d2 = kaldi_dir(tmp_path / "2", text="r1 a\nr2 b\nr3 c\n")
    assert f"{d2 / 'text'}:3: utterance r3 is not a recording in wav.scp" in refusal(d2)


def test_every_table_is_checked_for_unknown_and_repeated_ids(tmp_path):
    d = kaldi_dir(
        tmp_path,
        segments="u1 r1 0 1\nu2 r1 1 -1\nu1 r2 0 1\n",
        text="u1 a\nu2 b\n",
        utt2spk="u1 s\nu2 t\nu3 s\n",
        spk2utt="s u1\nt u2 u9\n",
        spk2gender="s m\nx f\n",
        utt2dur="u1 1.0\nu7 2.0\n",
        reco2dur="r1 3.0\nr5 1.0\n",
    )
    message = refusal(d)
    for expected in (
        f"{d / 'segments'}:3: segment u1 is listed twice in segments, at lines 1 and 3",
        f"{d / 'utt2spk'}:3: utterance u3 has no segment in segments",
        f"{d / 'spk2utt'}:2: speaker t disagrees with utt2spk (lists u9, which utt2spk does not)",
        f"{d / 'spk2gender'}:2: speaker x is in no line of utt2spk",
        f"{d / 'utt2dur'}:2: utterance u7 has no segment in segments",
        f"{d / 'reco2dur'}:2: recording r5 is not in wav.scp",
    ):
        assert expected in message


def test_malformed_segments_and_no_text_file_are_named(tmp_path):
    d = kaldi_dir(tmp_path, segments="u1 r1 0\nu2 r1 x 1\nu3 r1 -0.5 1\nu4 r2 1.5 1.0\n")
    message = refusal(d)
    assert f"{d / 'segments'}:1: expected '<utterance-id> <recording-id> <start> <end>'" in (
        message
    )
    assert f"{d / 'segments'}:2: start and end must be numbers" in message
    assert f"{d / 'segments'}:3: start must not be negative (got -0.5)" in message
    assert f"{d / 'segments'}:4: end 1.0 is not after start 1.5" in message
    assert f"{d / 'text'}: does not exist" in message
    assert "has no line in text" not in message  # the missing file is named once


def test_without_utt2spk_the_transcripts_are_kept(tmp_path):
    """Lhotse makes supervisions only from segments or utt2spk: without either every transcript
    came out empty (and validation then blamed each text line for an empty transcript)."""
    d = kaldi_dir(tmp_path, text="r1 hello there\nr2  café  au lait\n")
    cuts = import_kaldi(d, sampling_rate=16000)
    assert [(c.id, text(c), field(c, "speaker")) for c in cuts] == [
        ("r1", "hello there", None),
        ("r2", "café  au lait", None),
    ]
    assert origin(cuts[1]) == f"{d / 'text'}:2"


def test_segments_to_the_end_and_past_it_import_for_validation_to_judge(tmp_path):
    """A segment past its file's end crashed Lhotse's trimming (AssertionError); it is imported
    as declared and validation reports it (segment_outside)."""
    d = kaldi_dir(
        tmp_path,
        segments="u1 r1 0.5 -1\nu2 r2 1.0 4.0\n\nu3 r2 0.0 1.0\n",
        text="u1 a\nu2 b\nu3 c\n",
        utt2spk="u1 s\nu2 s\nu3 s\n",
    )
    cuts = {c.id: c for c in import_kaldi(d, sampling_rate=16000)}
    assert (cuts["u1"].start, cuts["u1"].duration) == (0.5, 2.5)
    assert (cuts["u2"].start, cuts["u2"].duration) == (1.0, 3.0)
    assert cuts["u3"].recording.sources[0].source == str(tmp_path / "r2.wav")
