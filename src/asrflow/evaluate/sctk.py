"""A cross-check of the paired comparison against NIST SCTK: ``sclite`` aligns two systems'
hypotheses with the references and ``sc_stats`` runs its Matched Pair Sentence Segment (Word
Error) test, MAPSSWE (Gillick & Cox, ICASSP 1989), on the pair.

Not part of the workflow: the tests (``tests/evaluate/test_sctk.py``) and
``bench/sctk_crosscheck.py`` use it to check asrflow's error counts and its paired bootstrap
(:mod:`asrflow.evaluate.paired`) against an independent implementation. SCTK is the Debian
package ``sctk``, which installs its tools under ``/usr/lib/sctk/bin`` (:data:`SCTK_DIRS`),
not on ``PATH``.

**What sclite is given.** The *normalised* texts asrflow scored (``ref_norm``, ``hyp_norm`` of
``utterances.csv``), one ``trn`` line per utterance, all under one speaker (``asrflow``). Every
distinct word is written as an opaque code (``w1``, ``w2``, ...; case-sensitive, ``-s``), so
nothing in sclite's transcript syntax (``(optional)`` words, ``{a / b}`` alternations, ``-``
fragments, ``;;`` comments, its case folding and byte encodings) can change what is compared: its
alignment only tests words for equality, so the counts are those of the words themselves.

**Where sclite counts differently.** sclite's alignment minimises a weighted cost (substitution
4, insertion and deletion 3 each), jiwer's (asrflow's) the number of edits, so the weighted path
can have more errors: ``b b c d a c`` against ``d a c b b d`` is 5 errors in asrflow (5
substitutions, 1 hit) and 6 in sclite (3 deletions, 3 hits, 3 insertions). sclite's count is never
lower than asrflow's; on 20 000 random utterances of 1-8 words over 2-4 letters, 4 differed.

**MAPSSWE.** sc_stats cuts each utterance into segments bounded by at least two words both
systems got right, counts each system's errors per segment, and tests the mean of the
per-segment differences with ``Z = mean / (sd / sqrt(segments))`` against ±1.96 (two-sided,
normal). When the differences do not vary (``sd == 0``: e.g. one system perfect, the other one
error in every segment) it sets ``Z = 0`` and calls the systems the same, however many segments.

Example::

    cmp = compare_evaluations("eval/a/demo.dev/utterances.csv", "eval/b/demo.dev/utterances.csv")
    cmp.wer_a, cmp.wer_b, cmp.mapsswe.significant, cmp.mapsswe.p
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

SCTK_DIRS = ("/usr/lib/sctk/bin",)
"""Where SCTK's tools are looked for after ``PATH`` (Debian's package puts them here)."""

SPEAKER = "asrflow"
"""The one speaker every utterance is written under (sclite's ``-i spu_id``: ``(spk_utt)``)."""

SYSTEMS = ("a", "b")
"""sclite titles of the two systems; sc_stats' ``mean`` is ``a``'s errors minus ``b``'s."""

_RESULT = re.compile(
    r"\(# segs: (?P<segments>\d+)\).*?\(mean: (?P<mean>\S+)\) \(std dev: (?P<sd>\S+)\) "
    r"\(Z Stat: (?P<z>\S+)\) \(Stat Diff: (?P<diff>Yes|No)\)"
)
_PATH = re.compile(r'<PATH id="\(' + SPEAKER + r'_(\d+)\)"[^>]*>\n(.*?)</PATH>', re.S)
_SYSTEM = re.compile(r'<SYSTEM title="([^"]*)"(.*?)</SYSTEM>', re.S)


@dataclass(frozen=True)
class Mapsswe:
    """sc_stats' MAPSSWE result for systems ``a`` and ``b``: the number of segments, the mean
    and standard deviation of the per-segment error differences (``a`` minus ``b``), its ``Z``
    and its verdict at 95 % (``significant``: sc_stats' ``Stat Diff: Yes``)."""

    segments: int
    mean: float
    std_dev: float
    z: float
    significant: bool

    @property
    def p(self) -> float:
        """Two-sided p of ``Z`` under the normal distribution, as sc_stats computes it (from
        the ``Z`` it prints, three decimals)."""
        return math.erfc(abs(self.z) / math.sqrt(2.0))


@dataclass(frozen=True)
class SctkComparison:
    """sclite's word errors per utterance of both systems and its reference words (in the
    order the utterances were given), and the MAPSSWE test of the pair."""

    errors_a: np.ndarray
    errors_b: np.ndarray
    ref_words: np.ndarray
    mapsswe: Mapsswe

    @property
    def wer_a(self) -> float:
        """sclite's pooled WER of ``a`` (fraction; 0 without reference words)."""
        return float(self.errors_a.sum() / max(1, self.ref_words.sum()))

    @property
    def wer_b(self) -> float:
        """sclite's pooled WER of ``b`` (fraction; 0 without reference words)."""
        return float(self.errors_b.sum() / max(1, self.ref_words.sum()))


def find_tool(name: str) -> str | None:
    """The path of SCTK tool ``name`` (``sclite``, ``sc_stats``) on ``PATH`` or in
    :data:`SCTK_DIRS`; ``None`` when SCTK is not installed."""
    found = shutil.which(name)
    if found:
        return found
    for folder in SCTK_DIRS:
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _tool(name: str) -> str:
    found = find_tool(name)
    if found is None:
        raise AsrflowError(
            f"SCTK's {name} was not found on PATH or in {', '.join(SCTK_DIRS)}; install NIST "
            "SCTK (Debian/Ubuntu: apt-get install sctk)"
        )
    return found


def _run(command: list[str], workdir: Path, stdin: str | None = None) -> str:
    """``command``'s stdout; :class:`AsrflowError` with its output when it fails."""
    result = subprocess.run(
        command, input=stdin, cwd=workdir, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip()[-2000:]
        raise AsrflowError(
            f"{Path(command[0]).name} failed (exit {result.returncode}) in {workdir}: {tail}"
        )
    return result.stdout


def encode_words(*systems: Sequence[str]) -> list[list[str]]:
    """Every text of every system with each distinct word replaced by one code (``w1``, ...,
    numbered in order of first appearance), the same code for the same word everywhere.

    >>> encode_words(["Ab c", "c"], ["ab"])
    [['w1 w2', 'w2'], ['w3']]
    """
    codes: dict[str, str] = {}
    out = []
    for texts in systems:
        out.append(
            [" ".join(codes.setdefault(w, f"w{len(codes) + 1}") for w in t.split()) for t in texts]
        )
    return out


def trn_text(texts: Sequence[str]) -> str:
    """A sclite ``trn`` file: one line ``words (asrflow_<n>)`` per text, ``n`` its index."""
    return "".join(f"{t} ({SPEAKER}_{i:07d})\n" for i, t in enumerate(texts))


def parse_sgml(sgml: str, num_utterances: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{system: (word errors, reference words)}`` per utterance (by index) from sclite's
    SGML alignments: ``C`` is a hit, ``S``/``D``/``I`` an error, all but ``I`` a reference
    word."""
    systems: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for title, body in _SYSTEM.findall(sgml):
        errors = np.full(num_utterances, -1, dtype=np.int64)
        refs = np.full(num_utterances, -1, dtype=np.int64)
        for index, alignment in _PATH.findall(body):
            marks = [item[0] for item in alignment.strip().split(":") if item]
            errors[int(index)] = sum(m in "SDI" for m in marks)
            refs[int(index)] = sum(m != "I" for m in marks)
        if (errors < 0).any():
            missing = int(np.flatnonzero(errors < 0)[0])
            raise AsrflowError(f"sclite's alignments of {title!r} lack utterance {missing}")
        systems[title] = (errors, refs)
    return systems


def parse_mapsswe(report: str) -> Mapsswe:
    """The ``MTCH_PR_RESULTS`` line of sc_stats' verbose MAPSSWE report (``-t mapsswe -v``)."""
    match = _RESULT.search(report)
    if match is None:
        raise AsrflowError(f"sc_stats' MAPSSWE report has no MTCH_PR_RESULTS line:\n{report}")
    return Mapsswe(
        segments=int(match["segments"]),
        mean=float(match["mean"]),
        std_dev=float(match["sd"]),
        z=float(match["z"]),
        significant=match["diff"] == "Yes",
    )


def run_sctk(refs: Sequence[str], hyps_a: Sequence[str], hyps_b: Sequence[str]) -> tuple[str, str]:
    """sclite's SGML alignments of both systems and sc_stats' verbose MAPSSWE report, run in a
    temporary folder on the texts as given (see :func:`compare_with_sctk`)."""
    sclite, sc_stats = _tool("sclite"), _tool("sc_stats")
    with tempfile.TemporaryDirectory(prefix="asrflow-sctk-") as tmp:
        work = Path(tmp)
        for name, texts in zip(("ref", *SYSTEMS), (refs, hyps_a, hyps_b), strict=True):
            (work / f"{name}.trn").write_text(trn_text(texts), encoding="utf-8")
        command = [sclite, "-r", "ref.trn", "trn", "-i", "spu_id", "-s", "-f", "0"]
        for name in SYSTEMS:
            command += ["-h", f"{name}.trn", "trn", name]
        sgml = _run([*command, "-o", "sgml", "stdout"], work)
        _run([sc_stats, "-p", "-t", "mapsswe", "-v", "-n", "pair", "-O", tmp], work, sgml)
        # the report can hold stray bytes that are not UTF-8 (seen in its comparison matrix)
        report = (work / "pair.stats.mapsswe").read_text(encoding="utf-8", errors="replace")
    return sgml, report


def compare_with_sctk(
    refs: Sequence[str], hyps_a: Sequence[str], hyps_b: Sequence[str]
) -> SctkComparison:
    """sclite's error counts of two systems on the same references and sc_stats' MAPSSWE
    test of ``a`` against ``b``. Element ``i`` of each sequence is the same utterance; texts
    are taken as already normalised (words split on whitespace, compared exactly)."""
    if not len(refs) == len(hyps_a) == len(hyps_b):
        raise AsrflowError(
            f"references and hypotheses differ in number: {len(refs)}, {len(hyps_a)}, {len(hyps_b)}"
        )
    if not len(refs):
        raise AsrflowError("nothing to compare: no utterances")
    sgml, report = run_sctk(*encode_words(refs, hyps_a, hyps_b))
    counts = parse_sgml(sgml, len(refs))
    (errors_a, ref_words), (errors_b, _) = counts[SYSTEMS[0]], counts[SYSTEMS[1]]
    return SctkComparison(errors_a, errors_b, ref_words, parse_mapsswe(report))


def read_scored(path: Pathlike) -> pd.DataFrame:
    """``id``, ``ref_norm``, ``hyp_norm``, ``word_errors`` and ``ref_words`` of an evaluation's
    ``utterances.csv``, sorted by ID (IDs and texts as written; an empty text stays ``""``)."""
    columns = ["id", "ref_norm", "hyp_norm", "word_errors", "ref_words"]
    text = {"id": str, "ref_norm": str, "hyp_norm": str}
    try:
        table = pd.read_csv(path, usecols=columns, dtype=text, keep_default_na=False)
    except (OSError, ValueError) as e:
        raise AsrflowError(f"{path}: not an evaluation's utterances.csv ({e})") from e
    return table.sort_values("id", kind="stable").reset_index(drop=True)


def compare_evaluations(path_a: Pathlike, path_b: Pathlike) -> SctkComparison:
    """:func:`compare_with_sctk` of two evaluations' ``utterances.csv``, utterances in ID order.
    Both must list the same utterance IDs with the same normalised references."""
    a, b = read_scored(path_a), read_scored(path_b)
    if not a["id"].equals(b["id"]):
        raise AsrflowError(f"{path_a} and {path_b} do not list the same utterance IDs")
    differ = a["ref_norm"] != b["ref_norm"]
    if differ.any():
        first = a.loc[differ, "id"].iloc[0]
        raise AsrflowError(
            f"{path_a} and {path_b} have different normalised references for utterance "
            f"{first!r}: not scored under the same contract"
        )
    return compare_with_sctk(list(a["ref_norm"]), list(a["hyp_norm"]), list(b["hyp_norm"]))
