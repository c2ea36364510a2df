"""Where the paths in provenance records point: the project root and paths relative to it.

Records (:mod:`asrflow.provenance`) store every path inside the project (the Snakemake working
directory, where ``results/`` lives) relative to its root and every other path absolute
(:func:`project_path`); a reader resolves them against the root the record itself lies in
(:func:`record_base`), so a moved or copied project checks its own files. A record from before
(no ``path_base``) may name the project's own files by their absolute path in the project's old
location: :func:`warn_old_paths` says so once per record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path, PurePath
from typing import Any

from asrflow.types import Pathlike

log = logging.getLogger(__name__)

SECTIONS = ("inputs", "outputs", "extra_inputs")
"""The sections of a record that list files with their digests."""
PATH_BASE = "project"
"""``path_base`` of a record whose paths inside the project are relative to its root."""
PROJECT_OUTPUTS = "results"
"""The folder of a project that holds everything the workflow writes."""


def display_path(path: Pathlike) -> str:
    """``path`` relative to the cwd when it lies below it, else as an absolute path."""
    p = Path(path).absolute()
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(p)


def project_path(path: Pathlike, root: Pathlike | None = None) -> str:
    """``path`` as records store it: relative to the project root ``root`` (default: the current
    directory, Snakemake's working directory) when it lies inside, else absolute.

    >>> project_path("/work/demo/results/a.wav", "/work/demo"), project_path("/data/b.wav", "/w")
    ('results/a.wav', '/data/b.wav')
    """
    base = os.path.abspath(os.getcwd() if root is None else root)
    full = os.path.normpath(os.path.join(base, os.fspath(path)))
    for candidate in _root_forms(base):
        if full == candidate:
            return "."
        if full.startswith(candidate.rstrip(os.sep) + os.sep):
            return PurePath(full[len(candidate.rstrip(os.sep)) + 1 :]).as_posix()
    return full


@lru_cache(maxsize=16)
def _root_forms(base: str) -> tuple[str, ...]:
    """A project root as given and with its symlinks resolved (importers resolve paths)."""
    return tuple(dict.fromkeys((os.path.normpath(base), os.path.realpath(base))))


def record_base(record_file: Path, record: Mapping[str, Any]) -> Path:
    """Directory the record's relative paths are relative to (see module docstring)."""
    rp = record.get("record_path")
    absf = Path(os.path.normpath(record_file.absolute()))
    if isinstance(rp, str) and rp and not os.path.isabs(rp):
        parts = PurePath(os.path.normpath(rp)).parts
        if (
            ".." not in parts
            and len(parts) < len(absf.parts)
            and absf.parts[-len(parts) :] == parts
        ):
            return Path(*absf.parts[: -len(parts)])
    return Path.cwd()


_warned: set[str] = set()


def old_absolute_paths(record: Mapping[str, Any], base: Path) -> list[str]:
    """The absolute paths a record from before project paths were stored relative lists that
    lie outside the project at ``base`` but in a project's ``results/``: paths into the project's
    old location, if it was moved or copied ([] for a record written relative)."""
    if record.get("path_base") == PATH_BASE:
        return []
    found = []
    for sec in SECTIONS:
        for files in (record.get(sec) or {}).values():
            for listed in files:
                p = PurePath(listed)
                outside = project_path(listed, base) == os.path.normpath(listed)
                if p.is_absolute() and outside and PROJECT_OUTPUTS in p.parts[:-1]:
                    found.append(listed)
    return sorted(set(found))


def warn_old_paths(record_file: Pathlike, record: Mapping[str, Any]) -> list[str]:
    """Warn, once per record and process, that a record lists paths into another location of
    the project (:func:`old_absolute_paths`); returns those paths."""
    base = record_base(Path(record_file), record)
    old = old_absolute_paths(record, base)
    key = os.path.normpath(Path(record_file).absolute())
    if old and key not in _warned:
        _warned.add(key)
        rule = record.get("rule", "?")
        log.warning(
            "%s was written before asrflow stored project paths relative to the project: it "
            "lists %d file(s) by an absolute path outside this project (%s%s), checked there, "
            "not here. If the project was moved or copied, rerun rule %s (delete its outputs, "
            "or snakemake --forcerun %s) to record and check this copy's own files.",
            display_path(record_file),
            len(old),
            old[0],
            ", ..." if len(old) > 1 else "",
            rule,
            rule,
        )
    return old
