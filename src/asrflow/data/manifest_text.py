"""Reading a manifest's text lines (UTF-8, a byte-order mark dropped) and reporting its bad lines
together, for the importers (:mod:`asrflow.data.importers`).

A line that cannot be read or parsed is collected as a problem (``"<file>:<line>: <message>"``)
and the importer raises them all at once, as one :class:`~asrflow.errors.AsrflowError`.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from pathlib import Path

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

MAX_LISTED = 20
BOM = "\ufeff"
ENCODING_HINT = (
    "Manifests must be UTF-8: convert the file from its real encoding, e.g. "
    "`iconv -f latin1 -t utf-8 old > new` (check with `file -i`)."
)


def _problem(location: str, message: str) -> str:
    return f"{location}: {message}"


def read_text_lines(path: Path, problems: list[str]) -> list[tuple[int, str]]:
    """``(line number, text)`` of every line of a UTF-8 text file (gzip-compressed when its name
    ends in ``.gz``), numbered from 1.

    A line that is not UTF-8 is left out and added to ``problems`` naming its line, column and
    byte. A leading UTF-8 byte-order mark (Windows editors write one) is dropped with a warning.
    A damaged compressed file is a problem naming the line where it breaks off.
    """
    lines: list[tuple[int, str]] = []
    lineno = 0
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                line = _decoded(path, lineno, raw, problems)
                if line is not None:
                    lines.append((lineno, line))
    except (OSError, EOFError, zlib.error) as exc:
        why = str(exc) or type(exc).__name__
        problems.append(
            _problem(
                f"{path}:{lineno + 1}",
                f"the file cannot be read past line {lineno} ({why}): is it damaged or cut "
                "short? Copy it again, or write it anew",
            )
        )
    return lines


def _decoded(path: Path, lineno: int, raw: bytes, problems: list[str]) -> str | None:
    """Line ``lineno`` as text, or ``None`` (a problem added) when it is not UTF-8."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = len(raw[: exc.start].decode("utf-8", errors="replace")) + 1
        problems.append(
            _problem(
                f"{path}:{lineno}", f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {column}"
            )
        )
        return None
    if lineno == 1 and line.startswith(BOM):
        log.warning(
            "%s starts with a UTF-8 byte-order mark (BOM); ignoring it (save the file "
            "as UTF-8 without BOM to silence this)",
            path,
        )
        line = line[len(BOM) :]
    return line


def json_line(line: str) -> tuple[object, str | None]:
    """A manifest line parsed as JSON: ``(value, None)``, or ``(None, what is wrong)`` naming the
    column; a line that ends too early (a closing brace missing) is named at its end."""
    text = line.rstrip("\r\n")
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            return None, (
                f"not valid JSON at column {len(text.rstrip()) + 1}, the end of the line "
                f"({exc.msg}): is a closing brace or quote missing?"
            )
        return None, f"not valid JSON at column {exc.colno} ({exc.msg})"


def _hint(problems: list[str], hint: str) -> str:
    """``hint``, with how to fix the encoding when a problem is one."""
    if any(": not UTF-8: " in p for p in problems):
        return f"{hint}\n{ENCODING_HINT}"
    return hint


def _raise_problems(kind: str, source: Pathlike, problems: list[str], hint: str) -> None:
    if not problems:
        return
    listed = "\n".join(f"  {p}" for p in problems[:MAX_LISTED])
    more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    raise AsrflowError(
        f"cannot import {kind} {source}: {len(problems)} bad line(s)\n{listed}{more}\n{hint}"
    )
