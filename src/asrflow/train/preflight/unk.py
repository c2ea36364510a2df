"""Target tokens a run's tokenizer cannot spell, counted per split before anything is trained.

A piece missing from the token list is ``<unk>`` (:meth:`asrflow.tokens.TokenEncoder.encode`). A
tokenizer trained on another corpus, or with a low ``character_coverage``, turns a run's words
into it, and the model learns to write ``<unk>`` for them: each is an error no training fixes
(issue 30: a run trained to the end with 72 of its 824 target tokens ``<unk>``, and nothing said
so). The smoke run counts the train and the dev split's targets before its first step and stops
when more than the recipe's ``diagnostics.max_unk_share`` of a split's are the tokenizer's
``<unk>``; below it, any ``<unk>`` is a warning (the smoke summary's ``warnings``). The batch
audit, which encodes every train target anyway, records the train count and warns in its report.

A dev word with a character that no train transcript has (``unseen``) is ``<unk>`` whatever
tokenizer is trained on the train split: that is the data's (the validation report warns of
such characters), so it is a warning and never counts towards the limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.text import normalize
from asrflow.tokens import TokenEncoder

MAX_WORDS = 5
"""Words that map to ``<unk>`` a message and a report name, the most frequent first."""


@dataclass
class UnkCount:
    """The target tokens of one split (``train``, ``dev``), how many are ``<unk>`` and the
    words that map to it; fed one transcript at a time (:meth:`add`)."""

    split: str
    known: frozenset[str] | None = None
    """The characters of the run's train targets, for another split: a word with a character
    outside them is ``unseen``. None: every ``<unk>`` is the tokenizer's (the train split)."""
    tokens: int = 0
    unk: int = 0
    unseen: int = 0
    """``<unk>`` tokens of words with a character the train targets lack."""
    words: Counter[str] = field(default_factory=Counter)
    unseen_words: Counter[str] = field(default_factory=Counter)

    def add(self, encoder: TokenEncoder, text: str, ids: Sequence[int]) -> None:
        """Count one transcript and its token IDs (``encoder.encode(text)``)."""
        self.tokens += len(ids)
        n = sum(1 for i in ids if i == encoder.unk_id)
        if not n:
            return
        self.unk += n
        for word, k in encoder.unknown_words(text):
            if self.known is not None and not set(word) <= self.known:
                self.unseen += k
                self.unseen_words[word] += 1
            else:
                self.words[word] += 1

    @property
    def share(self) -> float:
        """The share of the split's target tokens that are the tokenizer's ``<unk>`` (those of
        ``unseen`` words left out): what ``diagnostics.max_unk_share`` limits."""
        return max(0, self.unk - self.unseen) / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``split``, ``tokens``, ``unk`` (all), ``share`` (:attr:`share`),
        ``words`` (examples), ``unseen`` and ``unseen_words``."""
        return {
            "split": self.split,
            "tokens": self.tokens,
            "unk": self.unk,
            "share": round(self.share, 6),
            "words": _examples(self.words),
            "unseen": self.unseen,
            "unseen_words": _examples(self.unseen_words),
        }

    def describe(self) -> str:
        """``72 of 824 train target tokens (8.74 %) are <unk>, from words such as 'x'``."""
        return (
            f"{max(0, self.unk - self.unseen)} of {self.tokens} {self.split} target tokens "
            f"({100 * self.share:.2f} %) are <unk>, from words such as {_listed(self.words)}"
        )


def _examples(words: Counter[str]) -> list[str]:
    """Up to :data:`MAX_WORDS` of ``words``, the most frequent first (ties alphabetically)."""
    return [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_WORDS]


def _listed(words: Counter[str]) -> str:
    return ", ".join(repr(w) for w in _examples(words))


def count_unk(
    texts: Iterable[str], encoder: TokenEncoder, split: str, known: frozenset[str] | None = None
) -> UnkCount:
    """The :class:`UnkCount` of the transcripts of one split (``known``: as in UnkCount)."""
    count = UnkCount(split, known)
    for text in texts:
        count.add(encoder, text, encoder.encode(text))
    return count


def target_characters(texts: Iterable[str], encoder: TokenEncoder) -> frozenset[str]:
    """The characters of the normalized transcripts (spaces left out): a split's ``known``."""
    chars: set[str] = set()
    for text in texts:
        chars.update(normalize(text, encoder.normalization))
    chars.discard(" ")
    return frozenset(chars)


def unk_warnings(count: UnkCount, bpe_model: object) -> list[str]:
    """The warnings of a split with some ``<unk>`` targets (none when it has none)."""
    warnings = []
    if count.unk > count.unseen:
        warnings.append(
            f"{count.describe()}: the tokenizer {bpe_model} cannot spell them, so the model "
            "cannot learn to write them; train the tokenizer on this run's corpus if they matter"
        )
    if count.unseen:
        warnings.append(
            f"{count.unseen} of {count.tokens} {count.split} target tokens are <unk> in words "
            f"with a character no train transcript has, such as {_listed(count.unseen_words)}: "
            "no tokenizer trained on the train split can spell them (the validation report "
            "lists such characters)"
        )
    return warnings


def check_unk(count: UnkCount, max_share: float, run: str, bpe_model: object) -> list[str]:
    """Raise :class:`AsrflowError` when more than ``max_share`` of the split's target tokens
    are the tokenizer's ``<unk>`` (:attr:`UnkCount.share`), naming the run, the split, the
    share, example words and what to do; else :func:`unk_warnings`."""
    if count.share > max_share:
        if _is_starting_models(bpe_model, run):
            cause = (
                "the starting model's tokenizer (tokenizer: init) cannot spell them. Name a "
                f"tokenizer trained on this run's corpus in runs.{run}.tokenizer (the output "
                "layers then start fresh: docs/fine-tuning.md), or, if these words may be "
                "<unk>, raise diagnostics.max_unk_share"
            )
        else:
            cause = (
                f"the tokenizer {bpe_model} cannot spell them (was it trained on another "
                "corpus?). Train the tokenizer on this run's corpus (tokenizers.<name>.corpus; "
                "or raise its character_coverage), or, if these words may be <unk>, raise "
                "diagnostics.max_unk_share"
            )
        raise AsrflowError(
            f"run {run}: {count.describe()}, more than diagnostics.max_unk_share "
            f"({100 * max_share:g} %): {cause} (in the recipe, or for this run in "
            f"runs.{run}.overrides)"
        )
    return unk_warnings(count, bpe_model)


def _is_starting_models(bpe_model: object, run: str) -> bool:
    """Whether ``bpe_model`` is the copy of run ``run``'s starting model's tokenizer (rule
    init_tokenizer writes it to ``results/runs/<run>/tokenizer/``: asrflow.layout.run_file)."""
    path = Path(str(bpe_model))
    return path.parent.name == "tokenizer" and path.parent.parent.name == run
