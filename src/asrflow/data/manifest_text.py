"""Reading a manifest's text lines (UTF-8, a byte-order mark dropped) and reporting its bad lines
together, for the importers (:mod:`asrflow.data.importers`).

A line that cannot be read or parsed is collected as a problem (``"<file>:<line>: <message>"``)
and the importer raises them all at once, as one :class:`~asrflow.errors.AsrflowError`.
"""

from __future__ import annotations

import logging
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
    """``(line number, text)`` of every line of a UTF-8 text file, numbered from 1.

    A line that is not UTF-8 is left out and added to ``problems`` naming its line, column and
    byte. A leading UTF-8 byte-order mark (Windows editors write one) is dropped with a warning.
    """
    lines: list[tuple[int, str]] = []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                column = len(raw[: exc.start].decode("utf-8", errors="replace")) + 1
                problems.append(
                    _problem(
                        f"{path}:{lineno}",
                        f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {column}",
                    )
                )
                continue
            if lineno == 1 and line.startswith(BOM):
                log.warning(
                    "%s starts with a UTF-8 byte-order mark (BOM); ignoring it (save the file "
                    "as UTF-8 without BOM to silence this)",
                    path,
                )
                line = line[len(BOM) :]
            lines.append((lineno, line))
    return lines


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
