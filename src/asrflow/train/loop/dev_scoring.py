"""The dev set scored while training: loss per token, WER and CER of greedy CTC transcripts.

A :class:`DevTally` adds up one validation's batches on one rank; under DDP its
:meth:`~DevTally.sums` are all-reduced and its transcripts gathered before :func:`dev_metrics`
turns the whole dev set's sums into the ``valid/*`` figures the checkpoints are chosen by. Word
and character errors are jiwer's, pooled over utterances (a corpus WER, not a mean of
per-utterance rates) and counted as :mod:`asrflow.evaluate.scoring` counts them, but on the
references as the dev manifest gives them: the evaluation's normalization contract is not
applied here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import jiwer

SUMS = ("loss_sum", "tokens", "errors", "words", "char_errors", "chars")
"""The order of :meth:`DevTally.sums` (what one all-reduce adds over the ranks)."""


@dataclass
class DevTally:
    """One validation's running sums and transcripts on this rank."""

    references: Mapping[str, str]
    loss_sum: float = 0.0
    """The batches' loss averaged over utterances, times their utterance counts."""
    tokens: int = 0
    errors: int = 0
    words: int = 0
    char_errors: int = 0
    chars: int = 0
    hyps: dict[str, str] = field(default_factory=dict)
    """Each scored utterance's transcript."""

    def is_padding(self, ids: Sequence[str]) -> bool:
        """Whether a batch holds only copies Lhotse made to give every rank a batch
        (``<id>_dup<n>``, alone in their batches when fewer cuts than ranks are left at the end
        of a sharded epoch): counting them would bias the metrics."""
        return all(self._is_copy(utt) for utt in ids)

    def _is_copy(self, utt: str) -> bool:
        base, sep, n = utt.rpartition("_dup")
        return bool(sep) and n.isdigit() and utt not in self.references and base in self.references

    def add(
        self, ids: Sequence[str], hyps: Sequence[str], mean_loss: float, num_tokens: int
    ) -> None:
        """A batch: its utterances' transcripts, its loss averaged over utterances and its
        target token count. An utterance without a reference is transcribed, not scored."""
        self.loss_sum += mean_loss * len(ids)
        self.tokens += num_tokens
        for utt, hyp in zip(ids, hyps, strict=True):
            self.hyps[utt] = hyp
            ref = self.references.get(utt, "")
            if not ref:
                continue
            words = jiwer.process_words(ref, hyp)
            chars = jiwer.process_characters(ref, hyp)
            self.errors += words.substitutions + words.deletions + words.insertions
            self.words += words.substitutions + words.deletions + words.hits
            self.char_errors += chars.substitutions + chars.deletions + chars.insertions
            self.chars += chars.substitutions + chars.deletions + chars.hits

    def sums(self) -> list[float]:
        """The sums in the order of :data:`SUMS`."""
        return [float(getattr(self, name)) for name in SUMS]


def dev_metrics(sums: Sequence[float]) -> dict[str, float]:
    """``valid/loss`` (per target token), ``valid/wer`` and ``valid/cer`` from the whole dev
    set's :meth:`DevTally.sums` (an empty dev set gives zeros, not a division by zero)."""
    loss_sum, tokens, errors, words, char_errors, chars = sums
    return {
        "valid/loss": loss_sum / max(tokens, 1.0),
        "valid/wer": errors / max(words, 1.0),
        "valid/cer": char_errors / max(chars, 1.0),
    }
