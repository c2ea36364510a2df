"""Verifying provenance records against the files on disk (``asrflow verify``).

:func:`verify` re-reads every file a record lists (never through the hash cache) and reports each
difference as a :class:`Mismatch`: an output modified or missing since its record was written, an
input changed, a record edited (its self-digest no longer matches) or unreadable.
:func:`changed_since_written` does the same for a few named files only, cheaply enough to run when
a job fails, so a damaged intermediate is named instead of reported as a bug. Records themselves
are built, written and read by :mod:`asrflow.provenance`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from asrflow.hashing import HashCache
from asrflow.io import dumps_json
from asrflow.provenance import (
    RECORD_SUFFIX,
    InvalidRecord,
    fresh_digest,
    is_record_name,
    read_record,
    record_digest,
    tree_digests,
    walk_records,
)
from asrflow.record_paths import SECTIONS, display_path, record_base, warn_old_paths
from asrflow.types import Pathlike

MODIFIED_OUTPUT = "modified output"
MISSING_OUTPUT = "missing output"
CHANGED_INPUT = "input changed since the record was made"
MISSING_INPUT = "missing input"
INVALID_RECORD = "invalid record"
RECORD_MODIFIED = "record modified"
NO_RECORD = "no record"
NOT_FOUND = "path not found"


@dataclass(frozen=True)
class Mismatch:
    """One problem found by :func:`verify`: which file, which record, what differs."""

    kind: str
    path: str
    record: str | None
    expected: str | None = None
    actual: str | None = None
    detail: str = ""
    rule: str | None = None
    """The rule whose record it is (set by :func:`changed_since_written`)."""

    def __str__(self) -> str:
        text = f"{self.path}: {self.kind}"
        if self.detail:
            text += f" ({self.detail})"
        if self.expected is not None or self.actual is not None:
            text += f"; expected {self.expected or '-'}, actual {self.actual or '-'}"
        if self.record is not None:
            text += f" [record {self.record}]"
        return text


@dataclass
class VerifyReport:
    """Result of :func:`verify_report`."""

    mismatches: list[Mismatch] = field(default_factory=list)
    records_checked: int = 0
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass
class _Entry:
    section: str
    name: str
    listed: str
    resolved: Path
    expected: str
    as_dir: bool
    tree: dict[str, str] | None = None
    """The digests of a directory's files, ``{relative path: sha256}``, if the record has them."""


@dataclass
class _Loaded:
    path: Path
    shown: str
    rule: str = "?"
    problems: list[Mismatch] = field(default_factory=list)
    entries: list[_Entry] = field(default_factory=list)
    valid: bool = False


def _load(path: Path) -> _Loaded:
    """Read a record and check its layout, self-digest and canonical form."""
    shown = display_path(path)
    loaded = _Loaded(path=path, shown=shown)
    try:
        text = path.read_text(encoding="utf-8")
        record = read_record(path, text)
    except (OSError, InvalidRecord, UnicodeDecodeError) as e:
        loaded.problems.append(Mismatch(INVALID_RECORD, shown, shown, detail=str(e)))
        return loaded
    loaded.valid = True
    loaded.rule = str(record.get("rule", "?"))
    actual = record_digest(record)
    if actual != record["record_sha256"]:
        loaded.problems.append(
            Mismatch(RECORD_MODIFIED, shown, shown, record["record_sha256"], actual,
                     "its content does not match its own digest")
        )  # fmt: skip
    elif dumps_json(record) != text:
        loaded.problems.append(
            Mismatch(RECORD_MODIFIED, shown, shown, detail="its bytes are not as written")
        )
    warn_old_paths(path, record)
    base = record_base(path, record)
    dirs = set(record.get("directories", []))
    trees = record.get("trees", {})
    for sec in SECTIONS:
        for name, files in record[sec].items():
            for listed, digest in files.items():
                resolved = Path(os.path.normpath(base / listed))
                loaded.entries.append(
                    _Entry(sec, name, listed, resolved, digest, listed in dirs, trees.get(listed))
                )
    return loaded


def _tree_mismatches(e: _Entry, kind: str, record: str, detail: str) -> list[Mismatch]:
    """The files below a directory entry that differ from the record's ``trees`` (each with
    its expected and actual digest); [] when the record does not list them."""
    if e.tree is None or not e.resolved.is_dir():
        return []
    now = tree_digests(e.resolved)
    found = []
    for rel in sorted(set(e.tree) | set(now)):
        expected, actual = e.tree.get(rel), now.get(rel)
        if expected == actual:
            continue
        why = "missing" if actual is None else "not in the record" if expected is None else ""
        shown = display_path(e.resolved / rel)
        text = f"{detail}, in directory {display_path(e.resolved)}" + (f": {why}" if why else "")
        found.append(Mismatch(kind, shown, record, expected, actual, text))
    return found


def _lists(loaded: _Loaded, file: Path) -> bool:
    """Whether the record lists ``file`` (itself, or inside a directory it lists)."""
    real = os.path.realpath(file)
    for e in loaded.entries:
        er = os.path.realpath(e.resolved)
        if er == real or (e.as_dir and real.startswith(er.rstrip(os.sep) + os.sep)):
            return True
    return False


def _candidate_records(file: Path) -> list[Path]:
    """Records in ``file``'s directory and its parents, up to the cwd (or the root)."""
    here = Path(os.path.normpath(file.absolute())).parent
    cwd = Path.cwd()
    found = []
    for d in [here, *here.parents]:
        found += sorted(
            p for p in d.glob("*" + RECORD_SUFFIX) if is_record_name(p.name) and p.is_file()
        )
        if d == cwd:
            break
    return found


def _select(p: Path, load: Callable[[Path], _Loaded]) -> tuple[list[Path], Mismatch | None]:
    """The records to check for one command-line path, or why there are none."""
    shown = display_path(p)
    if p.is_file() and p.name.endswith(RECORD_SUFFIX):
        return [p], None
    if p.is_dir():
        recs = walk_records(p)
        why = f"no *{RECORD_SUFFIX} below it"
    elif p.exists():
        recs = [r for r in _candidate_records(p) if not (L := load(r)).valid or _lists(L, p)]
        why = "no record in its directory or the ones above lists it"
    else:
        return [], Mismatch(NOT_FOUND, shown, None)
    return recs, None if recs else Mismatch(NO_RECORD, shown, None, detail=why)


def verify_report(paths: list[Pathlike], threads: int = 8) -> VerifyReport:
    """Check the records for ``paths`` by re-reading every file they list (no cache)."""
    report = VerifyReport()
    loaded: dict[Path, _Loaded] = {}

    def load(rec: Path) -> _Loaded:
        key = Path(os.path.normpath(rec.absolute()))
        if key not in loaded:
            loaded[key] = _load(rec)
        return loaded[key]

    selected: dict[int, _Loaded] = {}
    for arg in paths:
        recs, problem = _select(Path(arg), load)
        report.mismatches += [problem] if problem else []
        selected.update((id(L), L) for L in map(load, recs))

    records = list(selected.values())
    targets = list(dict.fromkeys((e.resolved, e.as_dir) for L in records for e in L.entries))
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        fresh = dict(zip(targets, pool.map(lambda t: fresh_digest(*t), targets), strict=True))
    report.records_checked = len(records)
    report.files_checked = len(targets)

    what = {"inputs": "input", "outputs": "output", "extra_inputs": "extra input"}
    for L in records:
        report.mismatches += L.problems
        for e in L.entries:
            actual = fresh[(e.resolved, e.as_dir)]
            if actual == e.expected:
                continue
            out = e.section == "outputs"
            if actual is None:
                kind = MISSING_OUTPUT if out else MISSING_INPUT
            else:
                kind = MODIFIED_OUTPUT if out else CHANGED_INPUT
            detail = f"rule {L.rule}, {what[e.section]} '{e.name}'"
            if e.as_dir and actual and (inside := _tree_mismatches(e, kind, L.shown, detail)):
                report.mismatches += inside
                continue
            detail += ", a directory: some file below it differs" if e.as_dir and actual else ""
            shown = display_path(e.resolved)
            report.mismatches.append(Mismatch(kind, shown, L.shown, e.expected, actual, detail))
    return report


def verify(paths: list[Pathlike], threads: int = 8) -> list[Mismatch]:
    """Every mismatch between the records for ``paths`` and the files on disk (see module doc).

    ``paths`` may be records (``*.prov.json``), directories (all records below them) or other
    files (the records in their directory or a parent directory that list them).
    """
    return verify_report(paths, threads=threads).mismatches


def changed_since_written(
    paths: Iterable[Pathlike], cache: HashCache | None = None
) -> list[Mismatch]:
    """The files among ``paths`` that a record lists as an output and that differ from it now.

    A damaged intermediate (a flipped byte, an edit, a partial copy) either makes a decompressor
    or parser fail with an error that looks like a bug, or parses and is silently used: a job
    checks its inputs with this before it starts (:class:`asrflow.workflow.Step`). Only the
    records in each file's directory and the ones above it are read, and only the named files are
    hashed again (through ``cache`` if given: a file whose size, mtime and inode are as when it
    was last hashed is not read again; without it, from disk). For a file in an output directory
    (or a directory itself) the record's ``trees`` name the file that differs; a record without
    them compares the whole directory.
    """
    found: dict[str, Mismatch] = {}
    loaded: dict[Path, _Loaded] = {}
    for path in dict.fromkeys(Path(p) for p in paths):
        if not path.exists() or path.name.endswith(RECORD_SUFFIX):
            continue
        real = os.path.realpath(path)
        for rec in _candidate_records(path):
            L = loaded.get(rec) or loaded.setdefault(rec, _load(rec))
            for e in L.entries:
                er = os.path.realpath(e.resolved)
                inside = e.as_dir and real.startswith(er.rstrip(os.sep) + os.sep)
                if e.section != "outputs" or not (er == real or inside):
                    continue
                for m in _changed_output(e, path, real, L, cache):
                    found.setdefault(m.path, m)
    return list(found.values())


def _changed_output(
    e: _Entry, path: Path, real: str, L: _Loaded, cache: HashCache | None
) -> list[Mismatch]:
    """How ``path`` (the output ``e`` of record ``L``, or a file inside it) differs from it."""
    detail = f"written by rule {L.rule}"
    if e.tree is not None:
        rel = Path(os.path.relpath(real, os.path.realpath(e.resolved))).as_posix()
        if not path.is_dir():
            expected, actual = e.tree.get(rel), _digest(path, False, cache)
            if actual == expected:
                return []
            return [
                Mismatch(MODIFIED_OUTPUT, display_path(path), L.shown, expected, actual, detail,
                         L.rule)
            ]  # fmt: skip
        prefix = "" if rel == "." else rel + "/"
        was = {k[len(prefix) :]: v for k, v in e.tree.items() if k.startswith(prefix)}
        now = tree_digests(path, cache)
        return [
            Mismatch(MODIFIED_OUTPUT, display_path(path / f), L.shown, was.get(f), now.get(f),
                     f"{detail}, in directory {display_path(path)}", L.rule)
            for f in sorted(set(was) | set(now))
            if was.get(f) != now.get(f)
        ]  # fmt: skip
    actual = _digest(e.resolved, e.as_dir, cache)
    if actual == e.expected:
        return []
    return [
        Mismatch(MODIFIED_OUTPUT, display_path(path), L.shown, e.expected, actual, detail, L.rule)
    ]


def _digest(path: Path, as_dir: bool, cache: HashCache | None) -> str | None:
    """:func:`~asrflow.provenance.fresh_digest`, through ``cache`` when given."""
    if cache is None or not (path.is_dir() if as_dir else path.is_file()):
        return fresh_digest(path, as_dir)
    return cache.sha256(path)
