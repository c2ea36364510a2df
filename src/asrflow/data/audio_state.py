"""Audio that changed after its import reruns the import, without re-reading unchanged audio.

Snakemake sees a split's manifest, not the audio files it names: a WAV rewritten or truncated
after the import would otherwise go unnoticed until ``asrflow verify`` re-reads everything. The
import's provenance record lists every audio file with its SHA-256 (``extra_inputs.audio``).
Each time the DAG is built, :func:`refresh_audio_state` compares them with the files as they are
now, through the hash cache (:class:`~asrflow.hashing.HashCache`: a file whose size, mtime and
inode are as when it was last hashed is not read again), and keeps a small *audio state* file,
an input of the import rule (``results/data/<corpus>/audio_state/<split>.json``):

- no import yet: the file is created (``{"audio_sha256": null}``);
- every file as the last import read it (a touched file is re-hashed and found equal): the file
  is left alone, whatever it holds, so nothing reruns;
- some file differs from the record, or is gone: the file is rewritten with the digest of the
  audio as it is now. It is newer than the import's output, so Snakemake reruns that import,
  and whatever its new cuts change after it; that import's record matches the files again.
  (A change undone before the import ran leaves the newer file behind: one import more, with
  the same output, so nothing after it reruns.)

It is written atomically and only when its content changes, so a dry run (``snakemake -n``)
that noticed a change leaves the same file the real run then finds.

The record lists audio inside the project relative to the project root
(:func:`~asrflow.record_paths.project_path`), so a moved or copied project checks its own audio. A
record from before lists it by its absolute path: that is checked where it is, with a warning
naming the record when it lies outside the project (:func:`~asrflow.record_paths.warn_old_paths`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from asrflow.hashing import HashCache, combine_tree
from asrflow.io import dumps_json, write_text
from asrflow.record_paths import record_base, warn_old_paths
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

AUDIO = "audio"
"""The extra-inputs name under which an import's record lists its audio."""

MISSING = "missing"


def recorded_audio(record_path: Pathlike) -> dict[str, str] | None:
    """``{audio path: sha256}`` of the import a record describes, each path as the record lists
    it; ``None`` without a usable record (no import yet, or a record from before audio was
    listed)."""
    found = _recorded(Path(record_path))
    return found[0] if found is not None else None


def _recorded(record_path: Path) -> tuple[dict[str, str], Path] | None:
    """(:func:`recorded_audio`, the project root its relative paths are relative to)."""
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        audio = record["extra_inputs"][AUDIO]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(audio, dict):
        return None
    warn_old_paths(record_path, record)
    return dict(audio), record_base(record_path, record)


def audio_digest(
    recorded: dict[str, str], cache: HashCache, base: Pathlike = "."
) -> tuple[str, list[str]]:
    """(digest of the recorded audio files as they are now, the files that differ from the
    record); relative paths are resolved against ``base`` (the project root)."""
    paths = sorted(recorded)
    where = {p: os.path.join(base, p) for p in paths}
    present = [p for p in paths if os.path.isfile(where[p])]
    found = cache.sha256_many(where[p] for p in present)
    now: dict[str, Any] = dict.fromkeys(paths, MISSING)
    now.update((p, found[where[p]]) for p in present)
    changed = [p for p in paths if now[p] != recorded[p]]
    return combine_tree((p, now[p]) for p in paths), changed


def refresh_audio_state(
    state_path: Pathlike, record_path: Pathlike, cache: HashCache | None = None
) -> Path:
    """Create or update ``state_path`` (see the module docstring); returns it."""
    state_path = Path(state_path)
    try:
        old = json.loads(state_path.read_text(encoding="utf-8"))["audio_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        old = MISSING
    found = _recorded(Path(record_path))
    if found is None:
        if old == MISSING:
            _write(state_path, None)
        return state_path
    recorded, base = found
    own = cache is None
    cache = cache or HashCache()
    try:
        digest, changed = audio_digest(recorded, cache, base)
    finally:
        if own:
            cache.close()
    if not changed:
        if old == MISSING:
            _write(state_path, digest)
        return state_path
    if old != digest:
        log.warning(
            "%d audio file(s) changed since %s was made (%s%s): the split is imported again",
            len(changed),
            record_path,
            ", ".join(changed[:3]),
            ", ..." if len(changed) > 3 else "",
        )
        _write(state_path, digest)
    return state_path


def _write(path: Path, digest: str | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, dumps_json({"audio_sha256": digest}))
