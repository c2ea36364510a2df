"""Provenance records: what a workflow step read, wrote, ran and with which settings.

A record is a JSON file (conventionally ``<output>.prov.json`` beside the step's outputs) with
the SHA-256 of every input, output and extra input (e.g. the audio files a manifest refers to),
the step's parameters, the code version and the installed package versions. :func:`verify`
re-reads the files and reports every difference; records also carry a digest of themselves, so
an edited record is caught too.

Record layout (``schema`` ``asrflow.provenance/1``)::

    {"schema", "rule", "record_path", "record_sha256", "path_base": "project",
     "inputs": {name: {path: sha256}}, "outputs": {...}, "extra_inputs": {...},
     "directories": [paths hashed as trees with hashing.sha256_tree],
     "trees": {directory: {relative path: sha256}},
     "params", "code": {"git": {"commit", "dirty"}, "script": {"path", "sha256"} | null,
     "library_sha256", "modules": {module: sha256}}, "packages",
     "host": {"hostname", "platform", ["slurm"]}, "started", "finished", ["details"]}

``code.modules`` holds the digest of every asrflow module the step imported (``asrflow status``
compares them with the checkout: :mod:`asrflow.status`). ``host.slurm`` is there only for a
step that ran inside a SLURM job: the job ID, array task, step, partition, nodes and GPUs it was
given (:func:`slurm_job`).

``trees`` holds the digest of every file below each directory, so a check names the file in a
directory that differs (a record from before it was kept names only the directory).

**Paths.** Every path inside the project (the Snakemake working directory, where ``results/``
lives: the current directory of every job) is stored relative to it, ``record_path`` included;
a path outside it (a corpus elsewhere) is stored absolute (:func:`project_path`;
``path_base: "project"`` marks a record written so). At verification relative paths are resolved
against the directory that holds ``record_path`` (so a moved or copied project checks its own
files), falling back to the current directory. A record from before (no ``path_base``) may list
the project's own files (an import's audio) by their absolute path: it is read as it is, and
:func:`~asrflow.record_paths.warn_old_paths` says once per record when such a path lies outside
the project, i.e. in the project's old location (:mod:`asrflow.record_paths`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from functools import lru_cache
from pathlib import Path, PurePath
from typing import Any

from asrflow.hashing import HashCache, combine_tree, sha256_file, sha256_tree, tree_files
from asrflow.io import dumps_json, write_json
from asrflow.record_paths import (  # noqa: F401 (record_base: readers import it from here too)
    PATH_BASE,
    SECTIONS,
    display_path,
    project_path,
    record_base,
)
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

SCHEMA = "asrflow.provenance/1"
RECORD_SUFFIX = ".prov.json"
PACKAGES = (
    "torch", "espnet", "lightning", "lhotse", "sentencepiece", "jiwer",
    "pandas", "numpy", "snakemake", "soundfile",
)  # fmt: skip
IGNORED_UNTRACKED = frozenset({"results", "logs", ".snakemake"})


# -- code and environment -----------------------------------------------------------------------
def _git(repo_dir: Pathlike, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=repo_dir, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def code_version(repo_dir: Pathlike = ".") -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout holding ``repo_dir`` (both null if none).

    Untracked files under ``results/``, ``logs/`` or ``.snakemake/`` do not make it dirty.
    """
    commit = _git(repo_dir, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git(repo_dir, "status", "--porcelain=v1", "--untracked-files=normal") or ""
    dirty = False
    for line in status.splitlines():
        if line.startswith("?? "):
            parts = PurePath(line[3:].strip('"')).parts
            if IGNORED_UNTRACKED.intersection(parts):
                continue
        if line.strip():
            dirty = True
            break
    return {"commit": commit.strip(), "dirty": dirty}


@lru_cache(maxsize=1)
def library_sha256() -> str:
    """Digest of the installed ``asrflow`` package's ``*.py`` files (paths and contents)."""
    import asrflow  # the package this module belongs to, complete only once imported

    root = Path(asrflow.__file__).parent
    files = [(r, p) for r, p in tree_files(root) if r.endswith(".py")]
    return combine_tree((r, sha256_file(p)) for r, p in files)


def module_digests(
    names: Iterable[str] | None = None, *, known: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``{module: sha256 of its source file}`` for the asrflow modules this process has imported
    (or for ``names``, found without importing them; a module that no longer exists is left
    out): the code a step actually ran, module by module. ``known``: digests taken earlier,
    kept as they are (a module's file is not read again)."""
    known = known or {}
    if names is None:
        found = {
            name: getattr(module, "__file__", None)
            for name, module in list(sys.modules.items())
            if name == "asrflow" or name.startswith("asrflow.")
        }
    else:
        found = {name: module_file(name) for name in names}
    return {
        name: known.get(name) or sha256_file(path)
        for name, path in sorted(found.items())
        if path and path.endswith(".py") and (name in known or os.path.isfile(path))
    }


def module_file(name: str) -> str | None:
    """The source file of module ``name`` as it would be imported now (not importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin else None


@lru_cache(maxsize=1)
def _package_versions() -> tuple[tuple[str, str | None], ...]:
    found: list[tuple[str, str | None]] = [("python", platform.python_version())]
    for name in PACKAGES:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, None))
    return tuple(found)


def package_versions() -> dict[str, str | None]:
    """Versions of Python and the key packages (``None`` when not installed); cached."""
    return dict(_package_versions())


SLURM_FIELDS = {
    "job_id": "SLURM_JOB_ID",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
    "step_id": "SLURM_STEP_ID",
    "job_name": "SLURM_JOB_NAME",
    "cluster": "SLURM_CLUSTER_NAME",
    "partition": "SLURM_JOB_PARTITION",
    "account": "SLURM_JOB_ACCOUNT",
    "nodelist": "SLURM_JOB_NODELIST",
    "cpus_on_node": "SLURM_CPUS_ON_NODE",
    "gpus": "SLURM_GPUS",
    "job_gpus": "SLURM_JOB_GPUS",
    "gpus_on_node": "SLURM_GPUS_ON_NODE",
    "step_gpus": "SLURM_STEP_GPUS",
    "cuda_visible_devices": "CUDA_VISIBLE_DEVICES",
    "restart_count": "SLURM_RESTART_COUNT",
}  # record key -> environment variable
"""What :func:`slurm_job` records of the SLURM environment (each only when set). Inside the
``srun`` step that snakemake-executor-plugin-slurm runs a job in, the job's ``SLURM_GPUS`` is
gone; the step's ``SLURM_GPUS_ON_NODE``/``SLURM_STEP_GPUS`` and ``CUDA_VISIBLE_DEVICES`` remain."""


def slurm_job(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The SLURM job this process runs in, from its ``SLURM_*`` variables; ``None`` outside one.

    >>> slurm_job({"SLURM_JOB_ID": "42", "SLURM_JOB_PARTITION": "gpu", "CUDA_VISIBLE_DEVICES": "0"})
    {'job_id': '42', 'partition': 'gpu', 'cuda_visible_devices': '0'}
    """
    env = os.environ if environ is None else environ
    if not env.get("SLURM_JOB_ID"):
        return None
    return {key: env[var] for key, var in SLURM_FIELDS.items() if var in env}


# -- records --------------------------------------------------------------------------------------
def to_jsonable(obj: Any) -> Any:
    """Convert params (Snakemake Namedlists, dicts, Paths, numpy scalars, ...) to plain JSON."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if hasattr(obj, "_allitems") and hasattr(obj, "_names"):  # snakemake Namedlist
        if not obj._names:
            return [to_jsonable(x) for x in obj]
        out: dict[str, Any] = {}
        unnamed = []
        for name, value in obj._allitems():
            if name is None:
                unnamed.append(to_jsonable(value))
            else:
                out[str(name)] = to_jsonable(value)
        if unnamed:
            out["_unnamed"] = unnamed
        return out
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((to_jsonable(x) for x in obj), key=repr)
    if hasattr(obj, "item") and hasattr(obj, "dtype") and getattr(obj, "ndim", 0) == 0:
        return to_jsonable(obj.item())  # numpy scalar
    if hasattr(obj, "tolist"):
        return to_jsonable(obj.tolist())
    if callable(obj):
        return f"<callable {getattr(obj, '__qualname__', type(obj).__name__)}>"
    return repr(obj)


def build_record(
    *,
    rule: str,
    inputs: Mapping[str, list[str]],
    outputs: Mapping[str, list[str]],
    params: Any,
    script: Pathlike | None,
    started: datetime,
    finished: datetime,
    extra_inputs: Mapping[str, list[str]] | None = None,
    hash_cache: HashCache | None,
    repo_dir: Pathlike | None = None,
    modules: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Hash every input, output and extra input and assemble a provenance record.

    Directories are hashed as trees and listed under ``directories``, their files' digests under
    ``trees``; paths inside the project are stored relative to it
    (:func:`~asrflow.record_paths.project_path`).
    ``repo_dir`` (for the git version) defaults to the script's directory, else the current
    directory. ``modules``: the
    digests of the asrflow modules the step ran (default: :func:`module_digests` now). Raises
    ``FileNotFoundError`` naming any path that does not exist.
    """
    sections = {"inputs": inputs, "outputs": outputs, "extra_inputs": extra_inputs or {}}
    listed = {
        sec: {str(name): [str(p) for p in paths] for name, paths in m.items()}
        for sec, m in sections.items()
    }
    every = list(dict.fromkeys(p for m in listed.values() for ps in m.values() for p in ps))
    missing = [p for p in every if not os.path.exists(p)]
    if missing:
        more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
        raise FileNotFoundError(
            f"rule {rule}: cannot record provenance, missing: {missing[:10]}{more}"
        )
    dirs = [p for p in every if os.path.isdir(p)]
    trees = {d: tree_digests(Path(d), hash_cache) for d in dirs}
    files = [p for p in every if p not in trees]
    if hash_cache is not None:
        digests = hash_cache.sha256_many(files)
    else:
        digests = {p: sha256_file(p) for p in files}
    digests.update((d, combine_tree(tree.items())) for d, tree in trees.items())
    record: dict[str, Any] = {"schema": SCHEMA, "rule": rule, "path_base": PATH_BASE}
    for sec, m in listed.items():
        record[sec] = {name: {project_path(p): digests[p] for p in ps} for name, ps in m.items()}
    record["directories"] = sorted({project_path(d) for d in dirs})
    record["trees"] = {project_path(d): tree for d, tree in sorted(trees.items())}
    record["params"] = to_jsonable(params)
    script_info = None
    if script is not None and Path(script).is_file():
        script_info = {"path": display_path(script), "sha256": sha256_file(script)}
    if repo_dir is None:
        repo_dir = Path(script).parent if script_info else Path.cwd()
    record["code"] = {
        "git": code_version(repo_dir),
        "script": script_info,
        "library_sha256": library_sha256(),
        "modules": dict(modules) if modules is not None else module_digests(),
    }
    record["packages"] = package_versions()
    record["host"] = {"hostname": socket.gethostname(), "platform": platform.platform()}
    slurm = slurm_job()
    if slurm is not None:
        record["host"]["slurm"] = slurm
    record["started"] = started.isoformat()
    record["finished"] = finished.isoformat()
    return record


def record_digest(record: Mapping[str, Any]) -> str:
    """SHA-256 of a record's stable JSON form, without its ``record_sha256`` field."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(dumps_json(body).encode("utf-8")).hexdigest()


def write_record(path: Pathlike, record: Mapping[str, Any]) -> None:
    """Atomically write ``record`` to ``path``, adding ``record_path`` and its self-digest."""
    full = {k: v for k, v in record.items() if k != "record_sha256"}
    full.setdefault("record_path", project_path(path))
    full["record_sha256"] = record_digest(full)
    write_json(path, full)
    log.info("provenance record written: %s", path)


def tree_digests(directory: Path, cache: HashCache | None = None) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every file below ``directory`` (the entries
    :func:`~asrflow.hashing.sha256_tree` combines), through ``cache`` if given."""
    files = tree_files(directory)
    if cache is None:
        return {rel: sha256_file(p) for rel, p in files}
    digests = cache.sha256_many([p for _, p in files])
    return {rel: digests[str(p)] for rel, p in files}


def fresh_digest(path: Path, as_dir: bool) -> str | None:
    """Digest read from disk now, never from a cache; None if missing; a marker on type change."""
    if as_dir:
        if path.is_dir():
            return sha256_tree(path)
        return "<not a directory>" if path.exists() else None
    if path.is_file():
        return sha256_file(path)
    return "<not a regular file>" if path.exists() else None


# -- reading records ---------------------------------------------------------------------------
class InvalidRecord(ValueError):
    """A file that should be a provenance record is not valid JSON or has the wrong layout."""


def _check_layout(record: Any) -> None:
    if not isinstance(record, dict):
        raise InvalidRecord("top level is not a JSON object")
    if record.get("schema") != SCHEMA:
        raise InvalidRecord(f"schema is {record.get('schema')!r}, expected {SCHEMA!r}")
    for sec in SECTIONS:
        m = record.get(sec)
        ok = isinstance(m, dict) and all(isinstance(v, dict) for v in m.values())
        if not ok or not all(isinstance(d, str) for v in m.values() for d in v.values()):
            raise InvalidRecord(f"'{sec}' is not a mapping of name -> {{path: sha256}}")
    dirs = record.get("directories", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise InvalidRecord("'directories' is not a list of paths")
    trees = record.get("trees", {})
    if not isinstance(trees, dict) or not all(
        isinstance(t, dict) and all(isinstance(d, str) for d in t.values()) for t in trees.values()
    ):
        raise InvalidRecord("'trees' is not a mapping of directory -> {path: sha256}")
    if not isinstance(record.get("record_sha256"), str):
        raise InvalidRecord("'record_sha256' (the record's own digest) is missing")


def read_record(path: Pathlike, text: str | None = None) -> dict[str, Any]:
    """Parse and check the layout of a record (not its self-digest); raises ``InvalidRecord``."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8") if text is None else text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidRecord(f"not valid JSON: {e}") from e
    _check_layout(record)
    return record


def is_record_name(name: str) -> bool:
    return name.endswith(RECORD_SUFFIX) and not name.startswith(".")


def walk_records(directory: Path) -> list[Path]:
    """Every record below ``directory``; hidden files/dirs (temp files, .snakemake) skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found += [Path(dirpath) / f for f in sorted(filenames) if is_record_name(f)]
    return found
