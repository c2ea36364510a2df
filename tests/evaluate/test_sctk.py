"""The paired comparison cross-checked against NIST SCTK (issue 14, section 1): sclite's error
counts against asrflow's on the same normalised texts, sc_stats' matched-pair sentence-segment
test (MAPSSWE) against the paired bootstrap, and bench/sctk_crosscheck.py's arguments.

Tests that run SCTK skip where it is not installed (Debian package ``sctk``; .ci/run installs it
where it can)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from asrflow.errors import AsrflowError
from asrflow.evaluate import sctk
from asrflow.evaluate.intervals import difference_interval
from asrflow.evaluate.paired import paired_difference, read_utterance_errors
from asrflow.evaluate.scoring import pooled, score_utterance, write_utterances_csv
from asrflow.evaluate.sctk import (
    compare_evaluations,
    compare_with_sctk,
    encode_words,
    find_tool,
    parse_mapsswe,
)
from asrflow.text import TextNormalization

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sctk_crosscheck.py"

needs_sctk = pytest.mark.skipif(
    find_tool("sclite") is None or find_tool("sc_stats") is None,
    reason="NIST SCTK (sclite, sc_stats) is not installed: apt-get install sctk",
)


@pytest.fixture(scope="module")
def bench():
    """bench/sctk_crosscheck.py as a module, with bench/ on the path as when it runs (its main
    imports bench/figures.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH.parent))
        spec = importlib.util.spec_from_file_location("sctk_crosscheck", BENCH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        yield module
        del sys.modules[spec.name]


def _sentences(n: int, length: int = 10) -> list[str]:
    return [" ".join(f"word{(i * 7 + j) % 50}" for j in range(length)) for i in range(n)]


def _wrong(sentence: str, errors: int) -> str:
    """``sentence`` with ``errors`` words in a row substituted, from its second word on (one
    segment for MAPSSWE, which cuts at two words both systems got right)."""
    words = sentence.split()
    for k in range(errors):
        words[1 + k] = f"wrong{k}"
    return " ".join(words)


def _bootstrap(cmp: sctk.SctkComparison) -> tuple[float, float, float]:
    return difference_interval(cmp.errors_a, cmp.errors_b, cmp.ref_words)


def _significant(interval: tuple[float, float, float]) -> bool:
    _, low, high = interval
    return low > 0 or high < 0


# --------------------------------------------------------------------------------------------
# cases with a known answer


@needs_sctk
def test_identical_systems_differ_for_neither_test() -> None:
    refs = _sentences(40)
    hyps = [_wrong(s, i % 3) for i, s in enumerate(refs)]
    cmp = compare_with_sctk(refs, hyps, hyps)
    assert _bootstrap(cmp) == (0.0, 0.0, 0.0)
    assert not cmp.mapsswe.significant
    assert cmp.mapsswe.z == 0.0 and cmp.mapsswe.p == 1.0


@needs_sctk
def test_a_right_where_b_is_often_wrong_differs_for_both() -> None:
    refs = _sentences(40)
    hyps_b = [_wrong(s, (1, 2, 0, 3)[i % 4]) for i, s in enumerate(refs)]
    cmp = compare_with_sctk(refs, refs, hyps_b)
    assert cmp.errors_a.sum() == 0 and cmp.errors_b.sum() == 60
    assert _significant(_bootstrap(cmp))
    assert cmp.mapsswe.significant and cmp.mapsswe.mean < 0  # a has fewer errors
    assert cmp.mapsswe.p < 0.001


@needs_sctk
def test_no_spread_in_the_segment_differences_is_no_difference_for_mapsswe() -> None:
    """A known disagreement, kept visible: b has exactly one error in each of 40 utterances, a
    none. Every segment's difference is -1, their standard deviation 0, and sc_stats then sets
    Z = 0 ("same"); the bootstrap's interval is [-10 %, -10 %]: significant."""
    refs = _sentences(40)
    cmp = compare_with_sctk(refs, refs, [_wrong(s, 1) for s in refs])
    assert cmp.mapsswe.segments == 40 and cmp.mapsswe.std_dev == 0.0
    assert not cmp.mapsswe.significant
    assert _bootstrap(cmp) == pytest.approx((-0.1, -0.1, -0.1))


@needs_sctk
def test_a_borderline_difference_both_call_not_significant(bench, tmp_path) -> None:
    """Simulated 10 % against 12 % word errors on 300 utterances (seed 0): asrflow -1.22 points
    [-2.67, +0.19], MAPSSWE Z -1.690 (p 0.091): neither significant."""
    a, b = bench.simulated_pair(tmp_path, "10 % vs 12 %", 0.10, 0.12, 0, 300)
    row = bench.crosscheck("borderline", a, b)
    assert row.high == pytest.approx(0.0019, abs=1e-4) and row.mapsswe.z == -1.690
    assert not row.bootstrap_significant and not row.mapsswe.significant


@needs_sctk
def test_a_boundary_case_where_the_two_tests_disagree(bench, tmp_path) -> None:
    """Kept visible (docs/evaluation.md, SCTK): the same scenario with seed 2. asrflow:
    -1.51 points [-3.00, +0.13], not significant; MAPSSWE: Z -1.976 (p 0.048), significant.
    Both sit at the 5 % boundary, from two different statistics of the same errors."""
    a, b = bench.simulated_pair(tmp_path, "10 % vs 12 %", 0.10, 0.12, 2, 300)
    row = bench.crosscheck("boundary", a, b)
    assert (row.low, row.high) == pytest.approx((-0.0300, 0.0013), abs=1e-4)
    assert row.mapsswe.z == -1.976 and row.mapsswe.p == pytest.approx(0.048, abs=1e-3)
    assert not row.bootstrap_significant and row.mapsswe.significant


# --------------------------------------------------------------------------------------------
# error counts: sclite against asrflow's scorer


@needs_sctk
def test_sclite_counts_what_asrflow_scored(tmp_path) -> None:
    """Raw texts with case, punctuation, typographic apostrophes, accents and symbols, scored
    by asrflow and written as utterances.csv: sclite, given the normalised texts, counts the
    same errors per utterance, hence the same pooled WER, to the last bit."""
    refs = [
        "Hello, World! It's a fine day.",
        "¡Hola, señor O’Brien! ¿Qué tal?",
        "The price is $5 + tax = $6.",
        "Don't panic; (really) don't.",
        "canción, CANCIÓN, Canción.",
        "",
        "one two three four five six",
    ]
    hyps_a = [
        "hello world its a fine day",
        "hola senor o'brien que tal",
        "the price is $5 tax = $6",
        "DON'T PANIC REALLY DON'T",
        "cancion canción",
        "uh",
        "",
    ]
    hyps_b = [r.upper() for r in refs[:5]] + ["", "one too three for five six seven"]
    contract = TextNormalization()
    folders = []
    for name, hyps in (("a", hyps_a), ("b", hyps_b)):
        scores = [
            score_utterance(f"u{i}", r, h, contract)
            for i, (r, h) in enumerate(zip(refs, hyps, strict=True))
        ]
        write_utterances_csv(scores, tmp_path / name / "utterances.csv")
        folders.append((tmp_path / name / "utterances.csv", scores))
    (path_a, scores_a), (path_b, scores_b) = folders
    cmp = compare_evaluations(path_a, path_b)
    assert cmp.errors_a.tolist() == [s.word_errors for s in scores_a]
    assert cmp.errors_b.tolist() == [s.word_errors for s in scores_b]
    assert cmp.ref_words.tolist() == [s.ref_words for s in scores_a]
    assert cmp.wer_a == pooled(scores_a)["wer"] and cmp.wer_b == pooled(scores_b)["wer"]
    assert cmp.errors_b[:5].sum() == 0 and cmp.wer_a > 0.3


@needs_sctk
def test_sclites_weighted_alignment_can_count_more_errors() -> None:
    """Where they differ: sclite aligns by weighted cost (substitution 4, insertion and deletion
    3), jiwer by the number of edits. Here jiwer finds 5 substitutions and a hit (5 errors),
    sclite 3 deletions, 3 hits and 3 insertions (6)."""
    ref, hyp = "b b c d a c", "d a c b b d"
    assert score_utterance("u", ref, hyp, TextNormalization()).word_errors == 5
    cmp = compare_with_sctk([ref], [hyp], [ref])
    assert cmp.errors_a.tolist() == [6] and cmp.ref_words.tolist() == [6]


# --------------------------------------------------------------------------------------------
# inputs and failures (no SCTK needed)


def test_words_are_coded_the_same_in_every_system() -> None:
    assert encode_words(["(a) {b", ""], ["{b /"]) == [["w1 w2", ""], ["w2 w3"]]


def _csv(path: Path, ids: list[str], refs: list[str]) -> Path:
    scores = [score_utterance(i, r, r, TextNormalization()) for i, r in zip(ids, refs, strict=True)]
    write_utterances_csv(scores, path)
    return path


def test_evaluations_must_list_the_same_utterances(tmp_path) -> None:
    a = _csv(tmp_path / "a.csv", ["u1", "u2"], ["a b", "c"])
    b = _csv(tmp_path / "b.csv", ["u1", "u3"], ["a b", "c"])
    with pytest.raises(AsrflowError, match="same utterance IDs"):
        compare_evaluations(a, b)
    c = _csv(tmp_path / "c.csv", ["u1", "u2"], ["a b", "d"])
    with pytest.raises(AsrflowError, match="'u2': not scored under the same contract"):
        compare_evaluations(a, c)


def test_missing_sctk_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(sctk, "SCTK_DIRS", ())
    assert find_tool("sclite") is None
    with pytest.raises(AsrflowError, match="apt-get install sctk"):
        compare_with_sctk(["a"], ["a"], ["b"])


def test_a_failing_tool_is_reported_with_its_output(tmp_path) -> None:
    with pytest.raises(AsrflowError, match=r"sh failed \(exit 3\).*boom"):
        sctk._run(["sh", "-c", "echo boom >&2; exit 3"], tmp_path)


def test_a_report_without_a_result_line_is_an_error() -> None:
    with pytest.raises(AsrflowError, match="MTCH_PR_RESULTS"):
        parse_mapsswe("Successful Completion\n")


def test_the_result_line_is_read() -> None:
    line = (
        "MTCH_PR_RESULTS (systems: a b) (# segs: 5) (Seg per Sent: 1.667) (% Error:  0.00 25.00) "
        "(mean: -1.000) (std dev: 0.000) (Z Stat: 0.000) (Stat Diff: No)"
    )
    assert parse_mapsswe(line) == sctk.Mapsswe(5, -1.0, 0.0, 0.0, False)


# --------------------------------------------------------------------------------------------
# bench/sctk_crosscheck.py


@needs_sctk
def test_bench_compares_two_evaluation_folders(bench, tmp_path, capsys) -> None:
    a, b = bench.simulated_pair(tmp_path, "smoke", 0.05, 0.30, 0, 30)
    bench.main([str(a), str(b)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["pair", "utts"] and out[1].startswith("a vs b")
    row = bench.crosscheck("smoke", a, b)
    assert row.counts_differ == 0 and row.wer_a == row.sclite_wer_a
    assert row.bootstrap_significant and row.mapsswe.significant and row.agree
    paired = paired_difference(
        read_utterance_errors(a / "utterances.csv"), read_utterance_errors(b / "utterances.csv")
    )
    assert (row.diff, row.low, row.high) == paired


@needs_sctk
def test_bench_synthetic_mode_prints_the_agreement(bench, capsys) -> None:
    bench.main(["--synthetic", "--seeds", "1", "--utterances", "20"])
    out = capsys.readouterr().out
    assert "identical (seed 0)" in out and "scenario" in out
    assert len([line for line in out.splitlines() if "(seed 0)" in line]) == len(bench.SCENARIOS)


def test_bench_wants_two_evaluations(bench) -> None:
    with pytest.raises(SystemExit):
        bench.main(["only-one"])


def test_bench_row_verdicts(bench) -> None:
    mapsswe = sctk.Mapsswe(10, -0.5, 1.0, -2.5, True)
    row = bench.Row("x", 10, 0.1, 0.1, 0.2, 0.2, 0, -0.1, -0.2, -0.01, mapsswe)
    assert row.bootstrap_significant and row.agree
    assert np.isclose(mapsswe.p, 0.0124, atol=1e-4)
