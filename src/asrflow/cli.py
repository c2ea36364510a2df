"""The ``asrflow`` command line.

Subcommands live in :data:`SUBCOMMANDS` (name -> :class:`Subcommand`); to add one, write a
``configure(parser)`` and a ``run(args) -> exit code`` and register them there.

``asrflow verify PATH...`` re-reads the files that provenance records list and reports every
difference; it exits 1 on any mismatch, 0 when everything matches.

``asrflow status`` lists, per artifact, what differs from the current checkout (inputs, rule
params, code modules, package versions: :mod:`asrflow.status`); it prints "up to date" and
exits 0 when nothing does, else 1.

``asrflow plan RUN...`` prepares the runs' data (import, validation, filter: nothing trains) and
prints each run's plan: every value ``recipe: auto`` derives from the train split, with its
reason (:mod:`asrflow.recipe.plan`); for a run with a named recipe, what auto would choose.

``asrflow where SHARD_DIR CUT_ID...`` prints the shard, and the position in it, of each cut
(:mod:`asrflow.data.shards`); it exits 1 if one is in no shard.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    from asrflow.verify import verify_report  # each subcommand imports only what it runs

    report = verify_report(args.paths, threads=args.threads)
    for m in report.mismatches:
        print(f"MISMATCH {m}")
    checked = f"{report.records_checked} record(s), {report.files_checked} file(s) checked"
    if report.mismatches:
        print(f"verify: FAILED: {len(report.mismatches)} mismatch(es); {checked}")
        return 1
    print(f"verify: OK: {checked}, all match")
    return 0


# -- status ---------------------------------------------------------------------------------------
def _configure_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", help="the results directory (default: results)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--no-params",
        action="store_true",
        help="do not ask Snakemake which rule params changed (it builds the DAG: seconds)",
    )
    p.add_argument(
        "snakemake_args",
        nargs=argparse.REMAINDER,
        help="after --: arguments for that Snakemake call (e.g. -- --configfile my.yaml)",
    )


def _run_status(args: argparse.Namespace) -> int:
    # each subcommand imports only what it runs
    from asrflow.status import format_status, params_changes, status_json, workflow_status

    extra = [a for a in args.snakemake_args if a != "--"]
    changed = [] if args.no_params else params_changes(extra)
    statuses = workflow_status(args.results, params_changed=changed)
    if args.json:
        print(json.dumps(status_json(statuses), indent=2, sort_keys=True))
    else:
        print(format_status(statuses))
    return 0 if all(s.up_to_date for s in statuses) else 1


# -- plan -----------------------------------------------------------------------------------------
def _configure_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", help="the results directory (default: results)")
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="runs of the config to plan; after --, arguments for the Snakemake call that makes "
        "the plans (e.g. fsdd -- --configfile my.yaml)",
    )


def _run_plan(args: argparse.Namespace) -> int:
    from asrflow.recipe.plan import plan_lines, read_plan  # each subcommand imports only its own

    # argparse hands over what follows -- as more RUNs: the first option starts Snakemake's
    first = next((i for i, a in enumerate(args.runs) if a.startswith("-")), len(args.runs))
    names, extra = args.runs[:first], [a for a in args.runs[first:] if a != "--"]
    if not names:
        raise AsrflowError("asrflow plan: name at least one run (asrflow plan RUN [-- ARGS])")
    results = Path(args.results)
    files = [results / "runs" / run / "plan" / "plan.json" for run in names]
    # the data stages up to each run's filtered train split, and the plan: nothing trains
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *map(str, files), *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AsrflowError(
            "the Snakemake call that makes the plans failed (run asrflow plan in the workflow "
            f"directory):\n{(proc.stdout + proc.stderr).strip()[-3000:]}"
        )
    for path in files:
        print("\n".join(plan_lines(read_plan(path))))
    return 0


# -- where ----------------------------------------------------------------------------------------
def _configure_where(p: argparse.ArgumentParser) -> None:
    p.add_argument("shard_dir", metavar="SHARD_DIR", help="a shard directory (with shards.json)")
    p.add_argument("cut_ids", nargs="+", metavar="CUT_ID", help="cut IDs to find")


def _run_where(args: argparse.Namespace) -> int:
    from asrflow.data.shards import find_cuts  # Lhotse and torch for this subcommand only

    located = find_cuts(args.shard_dir, args.cut_ids)  # one pass for all of them
    missing = 0
    for cut_id in args.cut_ids:
        found = located.get(cut_id)
        if found is None:
            print(f"{cut_id}: not found (no shard of {args.shard_dir} holds it)")
            missing += 1
            continue
        print(
            f"{cut_id}: shard {found['shard']} position {found['position']}: "
            f"{found['cuts']} line {found['position'] + 1}, {found['recording']} "
            f"member {found['member']}"
        )
    return 1 if missing else 0


SUBCOMMANDS: dict[str, Subcommand] = {
    "plan": Subcommand(
        help="prepare each run's data and print what recipe: auto derives from it, and why",
        configure=_configure_plan,
        run=_run_plan,
    ),
    "status": Subcommand(
        help="what differs between the results and this checkout: inputs, params, code, packages",
        configure=_configure_status,
        run=_run_status,
    ),
    "where": Subcommand(
        help="which shard, and which position in it, holds each cut ID",
        configure=_configure_where,
        run=_run_where,
    ),
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
