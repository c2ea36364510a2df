"""The ``asrflow`` command line.

Subcommands live in :data:`SUBCOMMANDS` (name -> :class:`Subcommand`); to add one, write a
``configure(parser)`` and a ``run(args) -> exit code`` and register them there.

``asrflow verify PATH...`` re-reads the files that provenance records list and reports every
difference; it exits 1 on any mismatch, 0 when everything matches.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from asrflow import __version__
from asrflow.errors import AsrflowError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Subcommand:
    """One ``asrflow <name>`` command."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- verify ---------------------------------------------------------------------------------------
def _configure_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a record (*.prov.json), a directory (every record below it), or an output file "
        "(the records beside it or in a parent directory that list it)",
    )
    p.add_argument("--threads", type=int, default=8, help="files hashed in parallel (default 8)")


def _run_verify(args: argparse.Namespace) -> int:
    from asrflow.provenance import verify_report

    report = verify_report(args.paths, threads=args.threads)
    for m in report.mismatches:
        print(f"MISMATCH {m}")
    checked = f"{report.records_checked} record(s), {report.files_checked} file(s) checked"
    if report.mismatches:
        print(f"verify: FAILED: {len(report.mismatches)} mismatch(es); {checked}")
        return 1
    print(f"verify: OK: {checked}, all match")
    return 0


SUBCOMMANDS: dict[str, Subcommand] = {
    "verify": Subcommand(
        help="check outputs and inputs against their provenance records",
        configure=_configure_verify,
        run=_run_verify,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per entry of :data:`SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="asrflow", description="asrflow: speech corpus to a chosen, verified ASR model."
    )
    parser.add_argument("--version", action="version", version=f"asrflow {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``asrflow``; returns the exit code (the console script passes it to ``sys.exit``)."""
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return SUBCOMMANDS[args.command].run(args)
    except AsrflowError as e:
        print(f"asrflow {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
