"""Benchmark: asrflow's paired bootstrap against NIST SCTK's matched-pair test, on pairs of systems.

For each pair of evaluations of one eval set (their ``utterances.csv``) it prints both systems'
pooled WER as asrflow counted it and as ``sclite`` counts it on the same normalised texts, how
many utterances sclite counts differently, asrflow's WER difference (a minus b, points) with its
paired 95 % bootstrap interval (:func:`asrflow.evaluate.paired.paired_difference`: 1000
resamples, seed 0) and verdict, ``sc_stats``' Matched Pair Sentence Segment (Word Error) test
(MAPSSWE: its Z, p and verdict at 95 %) and whether the two verdicts agree::

    uv run python bench/sctk_crosscheck.py EVAL_A EVAL_B      # two evaluation folders (or CSVs)
    uv run python bench/sctk_crosscheck.py                    # the demo run's dev evaluations
    uv run python bench/sctk_crosscheck.py --synthetic [--seeds 20] [--utterances 300]

Without arguments it pairs every two artifacts of ``results/runs/demo_ctc/eval/*/demo.dev``
when at least two are there, and otherwise falls back to ``--synthetic``: seeded simulated
systems (raw texts with case and punctuation, scored by :func:`asrflow.evaluate.scoring.
score_utterance` and written as ``utterances.csv`` like an evaluation's) at several error rates,
``--seeds`` eval sets each, and a count of agreements per scenario. Needs SCTK (Debian package
``sctk``; see :mod:`asrflow.evaluate.sctk`).

Every pair is also a row of ``results/bench/sctk_crosscheck.json`` (``bench/figures.py``), in
the columns of ``docs/figures/sctk_crosscheck.json``, the table in docs/evaluation.md: a run on
the demo's two evaluations can be copied over it (``cp results/bench/sctk_crosscheck.json
docs/figures/``, then ``uv run python bench/render_tables.py``).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from asrflow.evaluate.paired import paired_difference, read_utterance_errors
from asrflow.evaluate.scoring import score_utterance, write_utterances_csv
from asrflow.evaluate.sctk import Mapsswe, compare_evaluations, read_scored
from asrflow.text import TextNormalization

REPO = Path(__file__).resolve().parents[1]
DEMO_EVAL = REPO / "results" / "runs" / "demo_ctc" / "eval"
DEMO_SET = "demo.dev"
SCENARIOS = (  # name, word error rate of a, of b (before insertions' share)
    ("identical", 0.10, None),
    ("equal rates", 0.10, 0.10),
    ("10 % vs 11 %", 0.10, 0.11),
    ("10 % vs 12 %", 0.10, 0.12),
    ("10 % vs 15 %", 0.10, 0.15),
)
WORDS = (
    "the a of to and in that is was he for it with as his on be at by had not are but from or "
    "have an they which one you were her all she there would their we him been has when who will "
    "more no if out so said what up its about into than them can only other new some could time "
    "these two may then do first any my now such like our over man me even most made after also"
).split()


@dataclass(frozen=True)
class Row:
    """One pair's figures (WERs fractions as counted by asrflow and by sclite)."""

    name: str
    utterances: int
    wer_a: float
    sclite_wer_a: float
    wer_b: float
    sclite_wer_b: float
    counts_differ: int
    diff: float
    low: float
    high: float
    mapsswe: Mapsswe

    @property
    def bootstrap_significant(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def agree(self) -> bool:
        return self.bootstrap_significant == self.mapsswe.significant


def utterances_csv(path: Path) -> Path:
    """``path`` itself when it is a file, else its ``utterances.csv``."""
    return path if path.is_file() else path / "utterances.csv"


def crosscheck(name: str, eval_a: Path, eval_b: Path) -> Row:
    """Both tests on the evaluations ``eval_a`` and ``eval_b`` (folders or ``utterances.csv``)."""
    path_a, path_b = utterances_csv(eval_a), utterances_csv(eval_b)
    paired = paired_difference(read_utterance_errors(path_a), read_utterance_errors(path_b))
    if paired is None:
        sys.exit(f"{path_a} and {path_b} do not pair (other utterances or reference words)")
    sctk = compare_evaluations(path_a, path_b)
    a, b = read_scored(path_a), read_scored(path_b)
    refs = a["ref_words"].sum()
    differ = (a["word_errors"].to_numpy() != sctk.errors_a) | (
        b["word_errors"].to_numpy() != sctk.errors_b
    )
    return Row(
        name,
        len(a),
        a["word_errors"].sum() / refs,
        sctk.wer_a,
        b["word_errors"].sum() / refs,
        sctk.wer_b,
        int(differ.sum()),
        *paired,
        sctk.mapsswe,
    )


def print_table(rows: Sequence[Row]) -> None:
    header = (
        f"{'pair':<34}{'utts':>6}{'WER a':>8}{'sclite':>8}{'WER b':>8}{'sclite':>8}{'n≠':>4}"
        f"{'a-b [95 % interval]':>26}{'boot':>6}{'segs':>6}{'Z':>8}{'p':>7}{'MAPSSWE':>9}"
        f"{'agree':>7}"
    )
    print(header)
    for r in rows:
        interval = f"{100 * r.diff:+.2f} [{100 * r.low:+.2f}, {100 * r.high:+.2f}]"
        print(
            f"{r.name:<34}{r.utterances:>6}{100 * r.wer_a:>8.2f}{100 * r.sclite_wer_a:>8.2f}"
            f"{100 * r.wer_b:>8.2f}{100 * r.sclite_wer_b:>8.2f}{r.counts_differ:>4}"
            f"{interval:>26}{_yes(r.bootstrap_significant):>6}{r.mapsswe.segments:>6}"
            f"{r.mapsswe.z:>8.3f}{r.mapsswe.p:>7.3f}{_yes(r.mapsswe.significant):>9}"
            f"{_yes(r.agree):>7}"
        )


COLUMNS = (
    ("set", "eval set"),
    ("wer_a", "WER a"),
    ("wer_b", "WER b"),
    ("counts", "counts"),
    ("bootstrap", "bootstrap difference [95 %]"),
    ("mapsswe", "MAPSSWE"),
    ("verdict", "verdict"),
)


def figures_row(r: Row) -> dict[str, str]:
    """One pair as a row of ``results/bench/sctk_crosscheck.json`` (:data:`COLUMNS`)."""
    counts = (
        f"{r.counts_differ} utterance(s) counted differently by sclite"
        if r.counts_differ
        else "no utterance counted differently"
    )
    boot, maps = r.bootstrap_significant, r.mapsswe.significant
    verdict = {
        (True, True): "significant for both",
        (False, False): "not significant for either",
        (True, False): "significant for the bootstrap only",
        (False, True): "significant for MAPSSWE only",
    }[(boot, maps)]
    return {
        "set": f"{r.name}, {r.utterances} utt.",
        "wer_a": f"{100 * r.wer_a:.2f} %",
        "wer_b": f"{100 * r.wer_b:.2f} %",
        "counts": counts,
        "bootstrap": (f"{100 * r.diff:+.2f} points [{100 * r.low:+.2f}, {100 * r.high:+.2f}]"),
        "mapsswe": f"Z = {r.mapsswe.z:.3f} (p {r.mapsswe.p:.2f})",
        "verdict": verdict,
    }


def write_json(rows: Sequence[Row], load_before: str, settings: dict, notes: list[str]) -> None:
    """``results/bench/sctk_crosscheck.json``: a row per pair."""
    from figures import figures_json, write_figures  # bench/, beside this script

    table = [figures_row(r) for r in rows]
    data = figures_json(COLUMNS, table, load_before=load_before, notes=notes, settings=settings)
    write_figures("sctk_crosscheck", data)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def demo_pairs() -> list[tuple[str, Path, Path]]:
    """Every two artifacts' ``demo.dev`` evaluations of the demo run, where present."""
    found = sorted(p.parent.parent.name for p in DEMO_EVAL.glob(f"*/{DEMO_SET}/utterances.csv"))
    return [
        (f"{a} vs {b}", DEMO_EVAL / a / DEMO_SET, DEMO_EVAL / b / DEMO_SET)
        for a, b in itertools.combinations(found, 2)
    ]


def simulate(words: list[str], rate: float, rng: random.Random) -> list[str]:
    """A hypothesis of ``words`` with about ``rate`` errors per word: 60 % substitutions,
    20 % deletions, 20 % insertions (after the word)."""
    out = []
    for w in words:
        if rng.random() >= rate:
            out.append(w)
            continue
        kind = rng.random()
        if kind < 0.6:
            out.append(rng.choice([v for v in WORDS if v != w]))
        elif kind >= 0.8:
            out += [w, rng.choice(WORDS)]
    return out


def raw(words: list[str]) -> str:
    """Words as a transcript: the first capitalised, a comma after the third, a full stop."""
    shown = [w.capitalize() if i == 0 else w for i, w in enumerate(words)]
    if len(shown) > 3:
        shown[2] += ","
    return " ".join(shown) + ("." if shown else "")


def write_system(
    folder: Path, refs: list[list[str]], hyps: list[list[str]], contract: TextNormalization
) -> Path:
    """Score ``hyps`` against ``refs`` as asrflow does and write ``folder/utterances.csv``."""
    scores = [
        score_utterance(f"utt{i:05d}", raw(r), raw(h), contract)
        for i, (r, h) in enumerate(zip(refs, hyps, strict=True))
    ]
    folder.mkdir(parents=True, exist_ok=True)
    write_utterances_csv(scores, folder / "utterances.csv")
    return folder


def simulated_pair(
    workdir: Path, name: str, rate_a: float, rate_b: float | None, seed: int, utterances: int
) -> tuple[Path, Path]:
    """Two simulated evaluations of one simulated eval set (``b`` is ``a`` when ``rate_b`` is
    ``None``), written under ``workdir/<name>-<seed>/{a,b}``; the same arguments give the same
    texts on every machine."""
    rng = random.Random(f"{name}/{seed}")
    refs = [[rng.choice(WORDS) for _ in range(rng.randint(4, 20))] for _ in range(utterances)]
    hyps_a = [simulate(r, rate_a, rng) for r in refs]
    hyps_b = hyps_a if rate_b is None else [simulate(r, rate_b, rng) for r in refs]
    folder, contract = workdir / f"{name}-{seed}", TextNormalization()
    return (
        write_system(folder / "a", refs, hyps_a, contract),
        write_system(folder / "b", refs, hyps_b, contract),
    )


def synthetic(workdir: Path, seeds: int, utterances: int) -> list[Row]:
    """Both tests on every scenario of :data:`SCENARIOS`, ``seeds`` simulated eval sets each."""
    rows = []
    for (name, rate_a, rate_b), seed in itertools.product(SCENARIOS, range(seeds)):
        a, b = simulated_pair(workdir, name, rate_a, rate_b, seed, utterances)
        rows.append(crosscheck(f"{name} (seed {seed})", a, b))
    return rows


def print_agreement(rows: Sequence[Row]) -> None:
    print("\nscenario        pairs  bootstrap sig.  MAPSSWE sig.  agree  utterances counted ≠")
    for name, *_ in SCENARIOS:
        group = [r for r in rows if r.name.startswith(f"{name} (")]
        boot = sum(r.bootstrap_significant for r in group)
        maps = sum(r.mapsswe.significant for r in group)
        agree = sum(r.agree for r in group)
        differ = sum(r.counts_differ for r in group)
        print(f"{name:<16}{len(group):>5}{boot:>16}{maps:>14}{agree:>7}{differ:>22}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("evals", nargs="*", type=Path, help="two evaluation folders or CSVs")
    parser.add_argument("--synthetic", action="store_true", help="simulated systems only")
    parser.add_argument("--seeds", type=int, default=20, help="simulated eval sets per scenario")
    parser.add_argument("--utterances", type=int, default=300, help="per simulated eval set")
    args = parser.parse_args(argv)
    if args.evals and len(args.evals) != 2:
        parser.error("give two evaluations (folders with utterances.csv, or the CSVs)")
    from figures import load, settings_of  # bench/, beside this script

    load_before, settings = load(), settings_of(args)
    note = (
        "a minus b; bootstrap: asrflow's paired bootstrap (1000 resamples, seed 0); MAPSSWE: "
        "sc_stats' matched-pair test, significant at 95 %; counts: utterances whose errors "
        "sclite counts otherwise than asrflow."
    )
    if args.evals:
        a, b = args.evals
        rows = [crosscheck(f"{a.name} vs {b.name}", a, b)]
        print_table(rows)
        write_json(rows, load_before, settings, [f"a: {a}, b: {b}; {note}"])
        return
    pairs = [] if args.synthetic else demo_pairs()
    if pairs:
        rows = [crosscheck(*pair) for pair in pairs]
        print_table(rows)
        write_json(rows, load_before, settings, [f"Pairs of {DEMO_EVAL}/*/{DEMO_SET}; {note}"])
        return
    print(f"simulated systems: {args.seeds} eval sets of {args.utterances} utterances a scenario")
    with tempfile.TemporaryDirectory(prefix="asrflow-sctk-bench-") as tmp:
        rows = synthetic(Path(tmp), args.seeds, args.utterances)
    print_table(rows)
    print_agreement(rows)
    what = f"Simulated systems, {args.seeds} eval sets of {args.utterances} utterances a scenario"
    write_json(rows, load_before, settings, [f"{what}; {note}"])


if __name__ == "__main__":
    main()
