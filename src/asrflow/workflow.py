"""Adapter between Snakemake ``script:`` rules and the asrflow library.

Every ``scripts/*.py`` is a few lines::

    from asrflow.workflow import step

    with step(snakemake) as s:            # logs to snakemake.log[0] and stderr
        cuts = import_corpus(snakemake.input.manifest, **snakemake.params.importer)
        s.add_extra_inputs("audio", [c.recording.path for c in cuts])   # optional

Before the body runs, every input that another rule wrote is checked against that rule's
record (through the hash cache): an input changed since (a flipped byte that still parses) stops
the job, naming the file, the rule that wrote it and what to do, instead of being used. On normal
exit, if the rule declares an output named ``record``, a provenance record
(:mod:`asrflow.provenance`) is written there, with the digests of every other output, every input
and the extra inputs. On an exception the error is logged (a user error, :class:`AsrflowError`,
as its message only; anything else with its traceback) and re-raised, so the job fails.

A multi-GPU train job runs its script once per rank: Lightning's launcher starts the other ranks
by running the job's script (Snakemake's temporary copy) again, and ``srun`` may start one task
per device. Only rank 0 (:func:`asrflow.ranks.launched_rank`) owns the job: it writes
``snakemake.log[0]`` and the record. Every other rank logs to stderr and to its own file beside
the job's log, ``<log stem>.rank<R><suffix>`` (``logs/train/big.rank1.log``), and writes no
record, so a rank that starts later does not truncate the job's log.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from asrflow.errors import AsrflowError
from asrflow.hashing import HashCache
from asrflow.provenance import build_record, module_digests, to_jsonable, write_record
from asrflow.ranks import launched_rank
from asrflow.record_paths import project_path
from asrflow.types import Pathlike
from asrflow.verify import changed_since_written

log = logging.getLogger(__name__)

RECORD_OUTPUT = "record"
"""Name of the rule output that receives the provenance record."""

DEBUG_ENV = "ASRFLOW_DEBUG"
"""``ASRFLOW_DEBUG=1 snakemake ...``: jobs log at DEBUG, with the traceback of a user error."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

SOURCE_RULES = frozenset({"synthesize_corpus"})
"""Rules whose outputs are a corpus's source data, not intermediates: the synthetic demo corpus's
manifests and audio may be edited like any corpus's own (a changed manifest or audio file reruns
the import, :mod:`asrflow.data.audio_state`), so a job reading them does not refuse a change."""


def files_by_name(files: Any) -> dict[str, list[str]]:
    """``{name: [paths]}`` from a Snakemake Namedlist (unnamed items under ``_unnamed``).

    Also accepts a plain mapping, a list of paths or a single path.
    """
    if files is None:
        return {}
    if hasattr(files, "_allitems"):
        pairs: Iterable[tuple[str | None, Any]] = files._allitems()
    elif isinstance(files, Mapping):
        pairs = files.items()
    elif isinstance(files, (str, Path)):
        pairs = [(None, files)]
    else:
        pairs = [(None, f) for f in files]
    out: dict[str, list[str]] = {}
    for name, value in pairs:
        paths = [str(value)] if isinstance(value, (str, Path)) else [str(v) for v in value]
        out.setdefault(name if name is not None else "_unnamed", []).extend(paths)
    return out


def _named(files: Any, name: str) -> str | None:
    """The path of the item called ``name`` in a Namedlist or mapping, if any."""
    if files is None:
        return None
    value = files.get(name) if hasattr(files, "get") else getattr(files, name, None)
    return str(value) if isinstance(value, (str, Path)) else None


def rank_log(path: Pathlike, rank: int) -> Path:
    """The log file of a rank other than 0: ``logs/train/a.log`` -> ``logs/train/a.rank1.log``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def _caller_script(frame_globals: Mapping[str, Any]) -> Path | None:
    """The script that called :func:`step`.

    Snakemake runs a temporary copy of the script but sets ``__file__`` to the original path,
    so the caller's ``__file__`` is the best source; ``sys.argv[0]`` is the fallback.
    """
    for candidate in (frame_globals.get("__file__"), sys.argv[0] if sys.argv else None):
        if not candidate or not str(candidate).endswith(".py"):
            continue
        path = Path(candidate)
        if path.is_file() and ".snakemake/scripts" not in path.as_posix():
            return path
    return None


class Step:
    """Context manager for one job; see the module docstring. Use :func:`step` to create."""

    def __init__(
        self,
        snakemake: Any,
        *,
        script: Pathlike | None = None,
        hash_cache: HashCache | None = None,
        level: int | None = None,
        rank: int | None = None,
        quiet_exit: bool | None = None,
    ) -> None:
        """``rank``: this process's rank in a multi-process job (default: the one its launcher
        set, :func:`~asrflow.ranks.launched_rank`); only rank 0 writes the job's log and
        record. ``level``: of the job's log; default INFO, DEBUG when the environment sets
        ``ASRFLOW_DEBUG=1`` (a user error's traceback is then in the log). ``quiet_exit``: end
        the process with exit status 1 (no traceback on the console) after logging a user
        error; default: when running as a Snakemake script job."""
        self.snakemake = snakemake
        self.rank = launched_rank() if rank is None else rank
        self.rule = str(getattr(snakemake, "rule", None) or "unknown")
        self.script = Path(script) if script is not None else None
        self.hash_cache = hash_cache
        if level is None:
            level = logging.DEBUG if os.environ.get(DEBUG_ENV) == "1" else logging.INFO
        self.level = level
        if quiet_exit is None:
            kind = type(snakemake)
            quiet_exit = kind.__module__.startswith("snakemake") and kind.__name__ == "Snakemake"
        self.quiet_exit = quiet_exit
        self._file_handler: logging.Handler | None = None
        self.extra_inputs: dict[str, list[str]] = {}
        self.started: datetime | None = None
        self.modules: dict[str, str] = {}
        self.details: dict[str, Any] = {}
        self._handlers: list[logging.Handler] = []
        self._old_level = logging.NOTSET
        self._captured_warnings = False

    def add_extra_inputs(self, name: str, paths: Iterable[Pathlike]) -> None:
        """Record ``paths`` (e.g. audio a manifest refers to) as inputs called ``name``."""
        self.extra_inputs.setdefault(name, []).extend(str(p) for p in paths)

    def add_details(self, name: str, value: Any) -> None:
        """Record ``value`` (JSON-ready) under ``details.<name>`` of the provenance record, e.g.
        which checkpoints an average was made of, with their steps and scores."""
        self.details[name] = value

    # -- logging ----------------------------------------------------------------------------
    def _start_logging(self) -> None:
        root = logging.getLogger()
        self._old_level = root.level
        root.setLevel(min(self.level, root.level or self.level))
        formatter = logging.Formatter(LOG_FORMAT)
        logs = list(getattr(self.snakemake, "log", None) or [])
        handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
        if logs:
            path = Path(logs[0]) if self.rank == 0 else rank_log(logs[0], self.rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file_handler = logging.FileHandler(path, mode="w", encoding="utf-8")
            handlers.append(self._file_handler)
        for h in handlers:
            h.setFormatter(formatter)
            h.setLevel(self.level)
            root.addHandler(h)
        self._handlers = handlers
        self._captured_warnings = getattr(logging, "_warnings_showwarning", None) is None
        if self._captured_warnings:
            logging.captureWarnings(True)

    def _stop_logging(self) -> None:
        root = logging.getLogger()
        for h in self._handlers:
            root.removeHandler(h)
            h.close()
        self._handlers = []
        self._file_handler = None
        root.setLevel(self._old_level)
        if self._captured_warnings:
            logging.captureWarnings(False)

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._start_logging()
        self.started = datetime.now(UTC)
        # the code this job runs, hashed now (a long job must not record a later edit); modules
        # first imported during the job are added when the record is written
        self.modules = module_digests()
        log.info("rule %s: started (script %s)", self.rule, self.script or "unknown")
        error = self._changed_inputs_error()
        if error is not None:
            self.__exit__(type(error), error, None)  # logged; a Snakemake job exits quietly
            raise error
        if self.rank != 0:
            log.info(
                "rule %s: this process is rank %d of a multi-process job; rank 0 writes the "
                "job's log and provenance record",
                self.rule,
                self.rank,
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        user_error = False
        try:
            if exc is None:
                try:
                    self.write_record()
                except Exception:
                    log.exception("rule %s: could not write the provenance record", self.rule)
                    raise
                log.info("rule %s: done", self.rule)
            elif isinstance(exc, AsrflowError):
                log.error("rule %s failed: %s", self.rule, exc)
                self._traceback_to_log_file(exc)
                user_error = True
            elif isinstance(exc, KeyboardInterrupt):
                log.error("rule %s: interrupted", self.rule)
            elif damaged := self._damaged_inputs():
                log.error(
                    "rule %s failed reading its inputs (%s: %s): %s changed after it was "
                    "written:\n%s\nRun `asrflow verify results` to list every changed file, delete "
                    "the changed ones and rerun snakemake to rebuild them (if the disk is "
                    "failing, check it first).",
                    self.rule,
                    exc_type.__name__ if exc_type else "Exception",
                    exc,
                    "this file" if len(damaged) == 1 else "these files",
                    "\n".join(f"  {m}" for m in damaged),
                )
                self._traceback_to_log_file(exc)
                user_error = True
            else:
                log.error(
                    "rule %s failed with an unexpected error (a bug; please report it with this "
                    "log): %s: %s",
                    self.rule,
                    exc_type.__name__ if exc_type else "Exception",
                    exc,
                    exc_info=(exc_type, exc, tb) if exc_type is not None else None,
                )
        finally:
            self._stop_logging()
        if user_error and self.quiet_exit:
            # the message is logged; a traceback on the console would bury it
            raise SystemExit(1) from None
        return False

    def _changed_inputs_error(self) -> AsrflowError | None:
        """The error for inputs inside the project that differ from the records of the rules
        that wrote them (:func:`~asrflow.verify.changed_since_written`), if any."""
        inputs = files_by_name(getattr(self.snakemake, "input", None))
        paths = [p for ps in inputs.values() for p in ps if not os.path.isabs(project_path(p))]
        if not paths:
            return None
        cache = self.hash_cache if self.hash_cache is not None else HashCache()
        try:
            changed = [m for m in changed_since_written(paths, cache) if m.rule not in SOURCE_RULES]
        finally:
            if self.hash_cache is None:
                cache.close()
        if not changed:
            return None
        rules = " ".join(sorted({str(m.rule) for m in changed}))
        one = len(changed) == 1
        return AsrflowError(
            f"{'this input' if one else 'these inputs'} changed after "
            f"{'it was' if one else 'they were'} written (by the rule named; this job would "
            "use the changed content):\n"
            + "\n".join(f"  {m}" for m in changed)
            + f"\nDelete {'it' if one else 'them'} (or the output directory holding "
            f"{'it' if one else 'them'}) and rerun snakemake to rebuild, or rerun the rule that "
            f"wrote {'it' if one else 'them'} (snakemake --forcerun {rules}); "
            "`asrflow verify results` lists every changed file (if the disk is failing, check "
            "it first)."
        )

    def _damaged_inputs(self) -> list[Any]:
        """The job's inputs that differ from the records of the rules that wrote them."""
        try:
            inputs = files_by_name(getattr(self.snakemake, "input", None))
            return changed_since_written(p for paths in inputs.values() for p in paths)
        except Exception:  # the check must never hide the original error
            log.debug("could not check the inputs against their records", exc_info=True)
            return []

    def _traceback_to_log_file(self, exc: BaseException) -> None:
        """The traceback of a user error, for the rule's log file only, at DEBUG level (the
        profile shows a failed job's log on the console, where it would bury the message)."""
        if self._file_handler is not None and self.level <= logging.DEBUG:
            self._file_handler.handle(
                log.makeRecord(
                    log.name, logging.DEBUG, __file__, 0, "traceback of the error above",
                    (), (type(exc), exc, exc.__traceback__),
                )
            )  # fmt: skip

    def write_record(self) -> Path | None:
        """Write the provenance record if the rule has a ``record`` output and this is rank 0;
        return its path."""
        sm = self.snakemake
        if self.rank != 0:
            log.debug("rule %s: rank %d writes no record", self.rule, self.rank)
            return None
        target = _named(getattr(sm, "output", None), RECORD_OUTPUT)
        if target is None:
            log.debug("rule %s declares no '%s' output; no record", self.rule, RECORD_OUTPUT)
            return None
        finished = datetime.now(UTC)
        outputs = files_by_name(sm.output)
        outputs = {
            name: [p for p in paths if p != target]
            for name, paths in outputs.items()
            if name != RECORD_OUTPUT
        }
        outputs = {name: paths for name, paths in outputs.items() if paths}
        cache = self.hash_cache if self.hash_cache is not None else HashCache()
        try:
            record = build_record(
                rule=self.rule,
                inputs=files_by_name(getattr(sm, "input", None)),
                outputs=outputs,
                params=getattr(sm, "params", None),
                script=self.script,
                started=self.started or finished,
                finished=finished,
                extra_inputs=self.extra_inputs,
                hash_cache=cache,
                modules=module_digests(known=self.modules),
            )
            if self.details:
                record["details"] = to_jsonable(self.details)
        finally:
            if self.hash_cache is None:
                cache.close()
        write_record(target, record)
        return Path(target)


def step(snakemake: Any, *, script: Pathlike | None = None, **kwargs: Any) -> Step:
    """Wrap a Snakemake script's body: logging, error reporting and the provenance record.

    ``script`` defaults to the calling script (its ``__file__``, which Snakemake points at the
    original script). Other keyword arguments go to :class:`Step`.
    """
    if script is None:
        script = _caller_script(sys._getframe(1).f_globals)
    return Step(snakemake, script=script, **kwargs)


def share_package_with_jobs(src_dir: str) -> None:
    """Put ``src_dir`` (this checkout's ``src/``) first on ``PYTHONPATH`` for every job.

    Jobs inherit the environment of the Snakemake process, so scripts import the very asrflow
    code the workflow was started with, also inside a per-rule conda environment
    (``envs/asrflow.yaml``) that does not have the package installed.
    """
    parts = [src_dir, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
