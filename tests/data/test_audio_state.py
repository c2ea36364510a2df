"""The audio state file changes exactly when the audio an import read has changed since."""

from __future__ import annotations

import json
import os
from pathlib import Path

from asrflow.data.audio_state import refresh_audio_state
from asrflow.hashing import HashCache, sha256_file


def _import(tmp_path: Path, n: int = 3) -> tuple[list[Path], Path]:
    """Audio files and the record an import of them would write."""
    audio = []
    for i in range(n):
        p = tmp_path / "audio" / f"{i}.wav"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i]) * 100)
        audio.append(p)
    record = tmp_path / "imported.jsonl.gz.prov.json"
    record.write_text(
        json.dumps({"extra_inputs": {"audio": {str(p): sha256_file(p) for p in audio}}})
    )
    return audio, record


def _state(path: Path) -> tuple[str | None, int]:
    return json.loads(path.read_text())["audio_sha256"], path.stat().st_mtime_ns


def test_first_import_then_unchanged_audio_never_rewrite_the_state(tmp_path):
    state = tmp_path / "state.json"
    cache = HashCache(tmp_path / "cache.sqlite")
    refresh_audio_state(state, tmp_path / "no-record-yet.prov.json", cache)
    assert _state(state)[0] is None
    before = _state(state)
    audio, record = _import(tmp_path)
    refresh_audio_state(state, record, cache)  # the import ran: its record matches the files
    os.utime(audio[0])  # touched, content unchanged
    refresh_audio_state(state, record, cache)
    assert _state(state) == before


def test_changed_audio_rewrites_the_state_once(tmp_path):
    state = tmp_path / "state.json"
    cache = HashCache(tmp_path / "cache.sqlite")
    refresh_audio_state(state, tmp_path / "none.prov.json", cache)
    audio, record = _import(tmp_path)
    audio[1].write_bytes(b"truncated")
    refresh_audio_state(state, record, cache)
    changed = _state(state)
    assert changed[0] is not None
    refresh_audio_state(state, record, cache)  # a dry run, then the real run: the same file
    assert _state(state) == changed
    # the import runs again and records the new audio: nothing changes any more
    record.write_text(
        json.dumps({"extra_inputs": {"audio": {str(p): sha256_file(p) for p in audio}}})
    )
    refresh_audio_state(state, record, cache)
    assert _state(state) == changed


def test_missing_audio_counts_as_changed(tmp_path):
    state = tmp_path / "state.json"
    audio, record = _import(tmp_path)
    cache = HashCache(tmp_path / "cache.sqlite")  # not the default: results/ of the cwd
    refresh_audio_state(state, record, cache)
    first = _state(state)
    audio[2].unlink()
    refresh_audio_state(state, record, cache)
    assert _state(state)[0] != first[0]


def test_after_the_import_that_followed_a_change_nothing_reruns_again(tmp_path):
    """The import after a change may list other files (an utterance dropped with its audio):
    its record matches the files, so the state is left as it is (no second import)."""
    state = tmp_path / "state.json"
    audio, record = _import(tmp_path)
    cache = HashCache(tmp_path / "cache.sqlite")
    refresh_audio_state(state, record, cache)
    audio[2].unlink()
    refresh_audio_state(state, record, cache)
    changed = _state(state)
    record.write_text(
        json.dumps({"extra_inputs": {"audio": {str(p): sha256_file(p) for p in audio[:2]}}})
    )
    refresh_audio_state(state, record, cache)
    assert _state(state) == changed


def test_a_copied_project_checks_its_own_audio(tmp_path, monkeypatch):
    """Issue 30: a copy's import record named the audio in the old location, unchanged there,
    so a file truncated in the copy reran nothing."""
    import shutil
    from datetime import UTC, datetime

    from asrflow.provenance import build_record, write_record

    old, copy = tmp_path / "old", tmp_path / "copy"
    monkeypatch.chdir(old.mkdir() or old)
    audio = []
    for i in range(3):
        p = old / "results/corpora/audio" / f"{i}.wav"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i]) * 100)
        audio.append(str(p))  # as the importer names them: absolute
    Path("results/imported.jsonl.gz").write_text("cuts")
    now = datetime.now(UTC)
    record = "results/imported.jsonl.gz.prov.json"
    write_record(
        record,
        build_record(
            rule="import_manifest", inputs={}, outputs={"cuts": ["results/imported.jsonl.gz"]},
            params={}, script=None, started=now, finished=now, hash_cache=None,
            extra_inputs={"audio": audio},
        ),
    )  # fmt: skip
    state = Path("results/audio_state/dev.json")
    refresh_audio_state(state, record, HashCache("results/cache.sqlite"))
    shutil.copytree(old, copy)
    monkeypatch.chdir(copy)
    cache = HashCache("results/cache.sqlite")
    before = _state(state)
    refresh_audio_state(state, record, cache)
    assert _state(state) == before  # the copy's audio is as recorded: nothing reruns
    wav = copy / "results/corpora/audio/1.wav"
    wav.write_bytes(wav.read_bytes()[:50])
    refresh_audio_state(state, record, cache)
    assert _state(state)[0] != before[0]  # the copy's import reruns
    assert _state(old / "results/audio_state/dev.json") == before
