"""Issue 30: a bad Lhotse manifest line is named like a bad NeMo line (file, line, what to do)."""

import gzip
import json
from pathlib import Path

import pytest

from asrflow.data.cuts import make_cut, origin, text
from asrflow.data.importers import import_lhotse
from asrflow.errors import AsrflowError
from tests.conftest import write_wav


def cut_rows(tmp_path: Path, n: int = 3) -> list[dict]:
    """``n`` cuts (one second of audio each) as Lhotse writes them, one dict per line."""
    rows = []
    for k in range(n):
        wav = write_wav(tmp_path / f"u{k}.wav", 1.0, seed=k)
        cut = make_cut(
            utt_id=f"u{k}",
            audio=str(wav),
            sampling_rate=16000,
            num_samples=16000,
            duration=1.0,
            text=f"text {k}",
        )
        rows.append(cut.to_dict())
    return rows


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def refusal(manifest: Path) -> str:
    with pytest.raises(AsrflowError) as err:
        import_lhotse(manifest)
    return str(err.value)


def test_missing_audio_names_the_line(tmp_path):
    """It surfaced only as "could not write the provenance record" (FileNotFoundError)."""
    rows = cut_rows(tmp_path)
    rows[1]["recording"]["sources"][0]["source"] = str(tmp_path / "gone.wav")
    manifest = write_lines(tmp_path / "cuts.jsonl", [json.dumps(r) for r in rows])
    message = refusal(manifest)
    assert f"{manifest}:2: audio {tmp_path / 'gone.wav'} does not exist" in message
    assert "Fix the recordings' audio paths" in message


def test_a_line_missing_its_closing_brace_is_named_at_its_end(tmp_path):
    """A bare JSONDecodeError ("a bug") with neither file nor line before."""
    lines = [json.dumps(r) for r in cut_rows(tmp_path)]
    lines[2] = lines[2][:-1]
    manifest = write_lines(tmp_path / "cuts.jsonl", lines)
    message = refusal(manifest)
    assert f"{manifest}:3: not valid JSON at column {len(lines[2]) + 1}, the end of the line" in (
        message
    )
    assert "closing brace" in message


def test_unknown_and_missing_keys_are_named(tmp_path):
    """A TypeError ("a bug") before."""
    rows = cut_rows(tmp_path)
    rows[0]["supervisions"][0]["emotion"] = "happy"
    del rows[1]["supervisions"][0]["duration"]
    manifest = write_lines(tmp_path / "cuts.jsonl", [json.dumps(r) for r in rows] + ["[1]"])
    message = refusal(manifest)
    assert f"{manifest}:1: unknown key 'emotion' in a supervision" in message
    assert 'put extra fields under "custom"' in message
    assert f"{manifest}:2: missing key(s) 'duration' in a supervision" in message
    assert f"{manifest}:4: a line must be a JSON object" in message


def test_a_recordings_manifest_is_not_taken_for_cuts(tmp_path):
    recording = cut_rows(tmp_path, 1)[0]["recording"]
    manifest = write_lines(tmp_path / "recordings.jsonl", [json.dumps(recording)])
    assert f"{manifest}:1: a Recording, not a cut" in refusal(manifest)


def test_a_damaged_gzip_manifest_names_where_it_breaks_off(tmp_path):
    gz = tmp_path / "cuts.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in cut_rows(tmp_path, 30)))
    cut_short = tmp_path / "short.jsonl.gz"
    cut_short.write_bytes(gz.read_bytes()[:-40])
    message = refusal(cut_short)
    assert f"{cut_short}:" in message and "cannot be read past line" in message
    assert "Copy it again" in message


def test_empty_and_gzip_manifests_import(tmp_path):
    """An empty manifest gave TypeError; it imports as no cuts (validation names the split)."""
    assert import_lhotse(write_lines(tmp_path / "empty.jsonl", [])) == []
    rows = cut_rows(tmp_path)
    gz = tmp_path / "cuts.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    cuts = import_lhotse(gz)
    assert [(c.id, text(c), origin(c)) for c in cuts] == [
        (f"u{k}", f"text {k}", f"{gz}:{k + 1}") for k in range(3)
    ]
