"""Scoring: word and character errors of hypotheses against references, under one contract.

The contract is a :class:`~asrflow.text.TextNormalization`: reference and hypothesis are both
passed through :func:`asrflow.text.normalize` with it (case, punctuation, whitespace, accepted
alternative spellings), then aligned by jiwer. Every result records
:func:`contract_sha256` (the normalization and :data:`SCORING_VERSION`), so numbers produced
under different contracts, or by different versions of this scorer, are never ranked together.

Counting rules:

- **WER** pools errors: ``(S + D + I) / N`` summed over all utterances, never a mean of
  per-utterance rates (:func:`pooled`). With no reference words the rate is ``None``.
- **CER** counts characters exactly as :func:`jiwer.process_characters` does on the normalized
  strings, which is how training's ``valid/cer`` is computed
  (:mod:`asrflow.train.loop.dev_scoring`): every character counts, *including the single spaces
  between words* (``"ab cd"`` is 5 characters); leading and trailing spaces are stripped (and
  inner runs are already collapsed by the default contract).
- An **empty hypothesis** is scored as empty: every reference unit is a deletion (nothing is
  padded). An **empty reference** has 0 units; every hypothesis unit is an insertion.

Example::

    contract = TextNormalization.from_dict(config["normalization"])
    scores = [score_utterance(c.id, ref[c.id], hyp[c.id], contract) for c in cuts]
    summary = pooled(scores)               # {"wer": 0.123, "substitutions": ..., ...}
    write_utterances_csv(scores, "results/.../utterances.csv")
    write_alignments(scores, "results/.../alignments.txt")
    confusions(scores)                     # the most frequent word errors, as sclite's dtl
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jiwer

from asrflow.hashing import sha256_json
from asrflow.io import atomic_output, write_text
from asrflow.text import TextNormalization, normalize
from asrflow.types import Pathlike

SCORING_VERSION = 1
"""The version of this scoring implementation (as sacreBLEU's signature carries its version).
Bump it with every change to how errors are counted or strings are compared: it is part of
:func:`contract_sha256`, so figures from two scorers are never ranked together, and a rule
param of ``evaluate``, so a bump reruns every evaluation (and selection and the report)."""

CONFUSIONS_LISTED = 10
"""How many of each kind of word error :func:`confusions` lists."""

MISSING_SLICE = "(none)"
"""Slice value of utterances that lack the slice field."""

UTTERANCE_COLUMNS = (
    "id",
    "reference",
    "hypothesis",
    "ref_norm",
    "hyp_norm",
    "ref_words",
    "substitutions",
    "deletions",
    "insertions",
    "word_errors",
    "ref_chars",
    "char_errors",
)
"""Leading columns of :func:`write_utterances_csv`; slice fields follow, sorted."""


def contract_sha256(contract: TextNormalization) -> str:
    """The scoring contract's digest: its normalization and :data:`SCORING_VERSION`."""
    return sha256_json({"normalization": contract.to_dict(), "scoring_version": SCORING_VERSION})


@dataclass(frozen=True)
class UtteranceScore:
    """Errors of one utterance: word and character counts plus a readable word alignment.

    ``alignment`` is three lines (``REF:``, ``HYP:``, markers ``S``/``D``/``I`` under the
    erroneous column), or ``""`` when there are no word errors.
    """

    id: str
    reference: str
    hypothesis: str
    ref_norm: str
    hyp_norm: str
    ref_words: int
    hits: int
    substitutions: int
    deletions: int
    insertions: int
    ref_chars: int
    char_substitutions: int
    char_deletions: int
    char_insertions: int
    alignment: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    error_words: tuple[tuple[str, str], ...] = ()
    """The word errors as ``(reference word, hypothesis word)`` pairs in alignment order: a
    substitution has both, a deletion ``""`` as its hypothesis word, an insertion ``""`` as its
    reference word (:func:`confusions` counts them)."""

    @property
    def word_errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def char_errors(self) -> int:
        return self.char_substitutions + self.char_deletions + self.char_insertions


def score_utterance(
    utt_id: str,
    reference: str,
    hypothesis: str,
    contract: TextNormalization,
    fields: Mapping[str, Any] | None = None,
) -> UtteranceScore:
    """Normalize ``reference`` and ``hypothesis`` under ``contract`` and count their errors.

    ``fields`` are the utterance's slice fields (speaker, condition, ...); values are kept as
    strings.

    >>> s = score_utterance("u1", "Hello, World!", "hello word", TextNormalization())
    >>> (s.substitutions, s.deletions, s.insertions, s.ref_words)
    (1, 0, 0, 2)
    """
    ref_norm = normalize(reference, contract)
    hyp_norm = normalize(hypothesis, contract)
    ref_tokens, hyp_tokens = ref_norm.split(), hyp_norm.split()
    ref_chars, hyp_chars = ref_norm.strip(), hyp_norm.strip()

    if ref_tokens:
        words = jiwer.process_words(ref_norm, hyp_norm)
        hits, subs, dels, ins = words.hits, words.substitutions, words.deletions, words.insertions
        alignment = _render_alignment(words.references[0], words.hypotheses[0], words.alignments[0])
        error_words = _error_words(words.references[0], words.hypotheses[0], words.alignments[0])
    else:
        # Older jiwer refuses an empty reference; its errors are plain insertions either way.
        hits, subs, dels, ins = 0, 0, 0, len(hyp_tokens)
        alignment = _render_alignment([], hyp_tokens, []) if hyp_tokens else ""
        error_words = tuple(("", w) for w in hyp_tokens)
    if subs + dels + ins == 0:
        alignment = ""

    if ref_chars:
        chars = jiwer.process_characters(ref_norm, hyp_norm)
        c_hits, c_subs, c_dels, c_ins = (
            chars.hits,
            chars.substitutions,
            chars.deletions,
            chars.insertions,
        )
    else:
        c_hits, c_subs, c_dels, c_ins = 0, 0, 0, len(hyp_chars)

    return UtteranceScore(
        id=str(utt_id),
        reference=reference,
        hypothesis=hypothesis,
        ref_norm=ref_norm,
        hyp_norm=hyp_norm,
        ref_words=hits + subs + dels,
        hits=hits,
        substitutions=subs,
        deletions=dels,
        insertions=ins,
        ref_chars=c_hits + c_subs + c_dels,
        char_substitutions=c_subs,
        char_deletions=c_dels,
        char_insertions=c_ins,
        alignment=alignment,
        fields={str(k): str(v) for k, v in (fields or {}).items()},
        error_words=error_words,
    )


def _error_words(
    ref: Sequence[str], hyp: Sequence[str], chunks: Sequence[jiwer.AlignmentChunk]
) -> tuple[tuple[str, str], ...]:
    """:attr:`UtteranceScore.error_words` of one jiwer alignment."""
    pairs: list[tuple[str, str]] = []
    for chunk in chunks:
        r = ref[chunk.ref_start_idx : chunk.ref_end_idx]
        h = hyp[chunk.hyp_start_idx : chunk.hyp_end_idx]
        if chunk.type == "substitute":
            pairs += zip(r, h, strict=True)
        elif chunk.type == "delete":
            pairs += [(w, "") for w in r]
        elif chunk.type == "insert":
            pairs += [("", w) for w in h]
    return tuple(pairs)


def confusions(scores: Iterable[UtteranceScore], top: int = CONFUSIONS_LISTED) -> dict[str, Any]:
    """The most frequent word errors over ``scores``, as sclite's ``dtl`` report lists them
    (its confusion pairs, deletions and insertions), ``top`` of each, most frequent first (ties
    alphabetical), and the reference words most often wrong with how often they occur:

    ``{"substitutions": [[ref, hyp, n], ...], "deletions": [[word, n], ...],
    "insertions": [[word, n], ...], "words_wrong": [[word, wrong, occurrences], ...]}``

    ``words_wrong`` counts a reference word each time it was substituted or deleted; with a
    small closed vocabulary (digits, commands) it says which words a model cannot tell apart,
    e.g. a new speaker's "four" heard as "five".

    >>> c = confusions([score_utterance("u", "four two four", "five two", TextNormalization())])
    >>> c["substitutions"], c["deletions"], c["words_wrong"]
    ([['four', 'five', 1]], [['four', 1]], [['four', 2, 2]])
    """
    subs: Counter[tuple[str, str]] = Counter()
    dels: Counter[str] = Counter()
    ins: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for s in scores:
        seen.update(s.ref_norm.split())
        for r, h in s.error_words:
            if r and h:
                subs[(r, h)] += 1
            elif r:
                dels[r] += 1
            else:
                ins[h] += 1
    wrong = Counter(dels)
    for (r, _), n in subs.items():
        wrong[r] += n

    def ranked(counter: Counter[Any]) -> list[tuple[Any, int]]:
        return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:top]

    return {
        "substitutions": [[r, h, n] for (r, h), n in ranked(subs)],
        "deletions": [[w, n] for w, n in ranked(dels)],
        "insertions": [[w, n] for w, n in ranked(ins)],
        "words_wrong": [[w, n, seen[w]] for w, n in ranked(wrong)],
    }


def format_confusions(found: Mapping[str, Any]) -> str:
    """:func:`confusions` as lines of text (``""`` when there were no errors)."""
    lines = []
    if found["substitutions"]:
        pairs = ", ".join(f"{r} -> {h} {n}" for r, h, n in found["substitutions"])
        lines.append(f"substitutions: {pairs}")
    for kind in ("deletions", "insertions"):
        if found[kind]:
            lines.append(f"{kind}: " + ", ".join(f"{w} {n}" for w, n in found[kind]))
    if found["words_wrong"]:
        words = ", ".join(f"{w} {n}/{total}" for w, n, total in found["words_wrong"])
        lines.append(f"reference words most often wrong (wrong/occurrences): {words}")
    if not lines:
        return ""
    return "most frequent word errors\n" + "\n".join(f"  {line}" for line in lines)


def _render_alignment(
    ref: Sequence[str], hyp: Sequence[str], chunks: Sequence[jiwer.AlignmentChunk]
) -> str:
    """Three aligned lines in the style of sclite: REF, HYP and S/D/I markers."""
    columns: list[tuple[str, str, str]] = []
    if not chunks and hyp:  # empty reference: everything inserted
        columns = [("*" * len(w), w, "I") for w in hyp]
    for chunk in chunks:
        r = ref[chunk.ref_start_idx : chunk.ref_end_idx]
        h = hyp[chunk.hyp_start_idx : chunk.hyp_end_idx]
        if chunk.type == "equal":
            columns += [(a, b, "") for a, b in zip(r, h, strict=True)]
        elif chunk.type == "substitute":
            columns += [(a, b, "S") for a, b in zip(r, h, strict=True)]
        elif chunk.type == "delete":
            columns += [(a, "*" * len(a), "D") for a in r]
        elif chunk.type == "insert":
            columns += [("*" * len(b), b, "I") for b in h]
        else:  # pragma: no cover - jiwer has exactly four chunk types
            raise ValueError(f"unknown jiwer alignment chunk type {chunk.type!r}")
    widths = [max(len(a), len(b), 1) for a, b, _ in columns]
    lines = [
        "REF: " + " ".join(a.ljust(w) for (a, _, _), w in zip(columns, widths, strict=True)),
        "HYP: " + " ".join(b.ljust(w) for (_, b, _), w in zip(columns, widths, strict=True)),
        "     " + " ".join(m.ljust(w) for (_, _, m), w in zip(columns, widths, strict=True)),
    ]
    return "\n".join(line.rstrip() for line in lines)


def _rate(errors: int, total: int) -> float | None:
    return errors / total if total else None


def pooled(scores: Iterable[UtteranceScore]) -> dict[str, Any]:
    """Totals over ``scores`` and the pooled rates (total errors / total reference units).

    ``wer``/``cer`` are ``None`` when there are no reference words/characters;
    ``sentence_error_rate`` (share of utterances with any word error) is ``None`` for no
    utterances.
    """
    keys = (
        "ref_words",
        "ref_chars",
        "hits",
        "substitutions",
        "deletions",
        "insertions",
        "char_substitutions",
        "char_deletions",
        "char_insertions",
    )
    totals = dict.fromkeys(keys, 0)
    n = wrong = 0
    for s in scores:
        n += 1
        wrong += s.word_errors > 0
        for k in keys:
            totals[k] += getattr(s, k)
    word_errors = totals["substitutions"] + totals["deletions"] + totals["insertions"]
    char_errors = (
        totals["char_substitutions"] + totals["char_deletions"] + totals["char_insertions"]
    )
    return {
        "num_utterances": n,
        **totals,
        "word_errors": word_errors,
        "wer": _rate(word_errors, totals["ref_words"]),
        "char_errors": char_errors,
        "cer": _rate(char_errors, totals["ref_chars"]),
        "sentence_error_rate": _rate(wrong, n),
    }


def by_slice(
    scores: Iterable[UtteranceScore], fields: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`pooled` per value of each slice field: ``{field: {value: pooled(...)}}``.

    Utterances without a field are pooled under the value ``"(none)"``. Values are sorted.
    """
    scores = list(scores)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in fields:
        groups: dict[str, list[UtteranceScore]] = {}
        for s in scores:
            groups.setdefault(s.fields.get(name, MISSING_SLICE), []).append(s)
        out[name] = {value: pooled(groups[value]) for value in sorted(groups)}
    return out


def write_utterances_csv(scores: Iterable[UtteranceScore], path: Pathlike) -> None:
    """Atomically write one CSV row per utterance (see :data:`UTTERANCE_COLUMNS`).

    Slice fields follow as extra columns (union over all utterances, sorted; empty where absent).
    """
    scores = list(scores)
    slice_fields = sorted({k for s in scores for k in s.fields})
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*UTTERANCE_COLUMNS, *slice_fields])
        for s in scores:
            row = [
                s.id,
                s.reference,
                s.hypothesis,
                s.ref_norm,
                s.hyp_norm,
                s.ref_words,
                s.substitutions,
                s.deletions,
                s.insertions,
                s.word_errors,
                s.ref_chars,
                s.char_errors,
            ]
            writer.writerow([*row, *(s.fields.get(k, "") for k in slice_fields)])


def format_alignments(scores: Iterable[UtteranceScore], header: str = "") -> str:
    """Readable alignments of the utterances with word errors, separated by blank lines, after
    ``header`` and the most frequent errors (:func:`format_confusions`)."""
    scores = list(scores)
    blocks = [header.rstrip("\n")] if header else []
    summary = format_confusions(confusions(scores))
    if summary:
        blocks.append(summary)
    for s in scores:
        if s.word_errors:
            blocks.append(
                f"{s.id}\n{s.alignment}\nS={s.substitutions} D={s.deletions} I={s.insertions}"
            )
    return "\n\n".join(blocks) + "\n" if blocks else ""


def write_alignments(scores: Iterable[UtteranceScore], path: Pathlike, header: str = "") -> None:
    """Atomically write :func:`format_alignments` of ``scores`` to ``path``."""
    write_text(path, format_alignments(scores, header))
