"""What differs between the artifacts under ``results/`` and the current checkout.

``asrflow status`` (think of ``dvc status``, and of Nextflow's resume, whose task hash covers the
task's code) reads every provenance record (:mod:`asrflow.provenance`) and compares it with what
is here now:

- **inputs**: a file the step read has other content now (or is gone);
- **outputs**: an output was modified after the step wrote it (or is gone);
- **code**: an asrflow module the step ran (``code.modules`` of its record), or its script, has
  other content in this checkout;
- **packages**: a key package (:data:`asrflow.provenance.PACKAGES`) has another version;
- **params**: Snakemake would rerun the step because a rule param changed (asked of Snakemake
  itself, ``snakemake --list-changes params``, when :func:`params_changes` is given its command).

Snakemake reruns a step for a changed input or param; a changed module or package reruns nothing
by itself (a library edit would otherwise rerun training), so this is where it shows, and the
comparison report marks the rows it touches (:func:`changed_code`). Digests come from the hash
cache (:class:`~asrflow.hashing.HashCache`, checked against size and mtime), so an unchanged
workflow is checked without re-reading its data; ``asrflow verify`` re-reads everything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.hashing import HashCache, sha256_file
from asrflow.provenance import (
    RECORD_SUFFIX,
    InvalidRecord,
    module_digests,
    package_versions,
    read_record,
    walk_records,
)
from asrflow.record_paths import SECTIONS, record_base, warn_old_paths
from asrflow.types import Pathlike

KINDS = ("inputs", "outputs", "code", "packages", "params")
"""The kinds of difference, in the order they are listed."""


@dataclass(frozen=True)
class Difference:
    """One way an artifact differs from the checkout: ``kind`` (one of :data:`KINDS`), what
    (a file, module or package) and how."""

    kind: str
    what: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.what} ({self.detail})"


@dataclass
class ArtifactStatus:
    """The differences of the artifact one provenance record describes."""

    rule: str
    record: str
    outputs: list[str]
    differences: list[Difference] = field(default_factory=list)

    @property
    def up_to_date(self) -> bool:
        return not self.differences

    @property
    def artifact(self) -> str:
        """The output the record is named after (``<output>.prov.json``)."""
        return self.record.removesuffix(RECORD_SUFFIX)


class Checkout:
    """What the checkout has now (module and file digests, package versions), each computed
    once however many records ask: make one per status call or report."""

    def __init__(self, cache: HashCache | None = None) -> None:
        self.cache = cache
        self.packages = package_versions()
        self._modules: dict[str, str | None] = {}
        self._files: dict[str, str | None] = {}
        self._scripts: dict[str, str | None] = {}

    def module(self, name: str) -> str | None:
        if name not in self._modules:
            self._modules[name] = module_digests([name]).get(name)
        return self._modules[name]

    def script(self, path: str) -> str | None:
        """A script's digest, read once (never from the hash cache: a script is small)."""
        if path not in self._scripts:
            self._scripts[path] = sha256_file(path) if os.path.isfile(path) else None
        return self._scripts[path]

    def digests(self, paths: Iterable[str]) -> dict[str, str | None]:
        todo = [p for p in dict.fromkeys(paths) if p not in self._files]
        present = [p for p in todo if os.path.exists(p)]
        self._files.update(dict.fromkeys(todo))
        if present:
            cache = self.cache if self.cache is not None else HashCache()
            try:
                self._files.update(cache.sha256_many(present))
            finally:
                if cache is not self.cache:
                    cache.close()
        return self._files


def changed_code(record: Mapping[str, Any], current: Checkout | None = None) -> list[str]:
    """The asrflow modules (and the script) a record's step ran whose source differs now.

    A record written before module digests were recorded compares nothing (``[]``)."""
    code = record.get("code") or {}
    current = current or Checkout()
    changed = [
        name
        for name, digest in sorted((code.get("modules") or {}).items())
        if current.module(name) != digest
    ]
    script = code.get("script")
    if isinstance(script, Mapping) and script.get("path"):
        path = str(script["path"])
        if current.script(path) != script.get("sha256"):
            changed.append(path)
    return changed


def record_status(path: Path, current: Checkout) -> ArtifactStatus:
    """Compare one provenance record with the checkout."""
    try:
        record = read_record(path)
    except (OSError, InvalidRecord) as e:
        return ArtifactStatus("?", str(path), [], [Difference("outputs", str(path), str(e))])
    warn_old_paths(path, record)
    base = record_base(path, record)
    files = {
        sec: {
            listed: (os.path.normpath(base / listed), digest)
            for entries in record[sec].values()
            for listed, digest in entries.items()
        }
        for sec in SECTIONS
    }
    status = ArtifactStatus(str(record.get("rule", "?")), str(path), sorted(files["outputs"]), [])
    now = current.digests(p for m in files.values() for p, _ in m.values())
    for sec, kind, verb in (
        ("inputs", "inputs", "changed since the step read it"),
        ("extra_inputs", "inputs", "changed since the step read it"),
        ("outputs", "outputs", "modified after the step wrote it"),
    ):
        for listed, (resolved, digest) in sorted(files[sec].items()):
            actual = now.get(resolved)
            if actual != digest:
                status.differences.append(
                    Difference(kind, listed, "missing" if actual is None else verb)
                )
    status.differences += [
        Difference("code", name, "changed since the step ran it")
        for name in changed_code(record, current)
    ]
    for name, version in sorted((record.get("packages") or {}).items()):
        if name in current.packages and current.packages[name] != version:
            status.differences.append(
                Difference("packages", name, f"{version} -> {current.packages[name]}")
            )
    return status


def workflow_status(
    results: Pathlike = "results",
    *,
    params_changed: Iterable[str] = (),
    cache: HashCache | None = None,
) -> list[ArtifactStatus]:
    """The status of every record below ``results``; ``params_changed``: output files whose
    params Snakemake says changed (:func:`params_changes`)."""
    own = cache is None
    cache = cache or HashCache()
    try:
        current = Checkout(cache)
        statuses = [record_status(p, current) for p in walk_records(Path(results))]
    finally:
        if own:
            cache.close()
    changed = {os.path.normpath(p) for p in params_changed}
    for s in statuses:
        hit = sorted(o for o in s.outputs if os.path.normpath(o) in changed)
        if hit:
            s.differences.append(Difference("params", hit[0], "a rule param changed"))
    return statuses


def params_changes(snakemake_args: Sequence[str] = ()) -> list[str]:
    """Output files whose rule params changed, as Snakemake itself sees them (``snakemake
    --list-changes params``, run in the current directory with ``snakemake_args``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-changes", "params", *snakemake_args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AsrflowError(
            "snakemake --list-changes params failed (run asrflow status in the workflow "
            f"directory, or pass --no-params):\n{proc.stderr.strip()[-2000:]}"
        )
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def format_status(statuses: Sequence[ArtifactStatus]) -> str:
    """Readable text: ``up to date``, or each out-of-date artifact with its differences."""
    stale = [s for s in statuses if not s.up_to_date]
    if not stale:
        return f"up to date ({len(statuses)} artifact(s) checked)"
    lines = []
    for s in sorted(stale, key=lambda s: (s.rule, s.record)):
        lines.append(f"{s.rule}: {s.artifact}")
        for d in sorted(s.differences, key=lambda d: (KINDS.index(d.kind), d.what)):
            lines.append(f"    {d}")
    lines.append(f"{len(stale)} of {len(statuses)} artifact(s) differ from the checkout")
    return "\n".join(lines)


def status_json(statuses: Sequence[ArtifactStatus]) -> dict[str, Any]:
    """The same as JSON-ready data."""
    return {
        "up_to_date": all(s.up_to_date for s in statuses),
        "checked": len(statuses),
        "artifacts": [
            {**asdict(s), "artifact": s.artifact, "up_to_date": s.up_to_date}
            for s in statuses
            if not s.up_to_date
        ],
    }
