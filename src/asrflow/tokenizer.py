"""SentencePiece tokenizers, trained on the normalized text of the TRAIN split only.

The model sees ``normalize(text(cut))`` for every cut of the train CutSet (empty results are
skipped and counted) and nothing else: dev and test text never reach it.

Training is byte-reproducible: one thread, every sentence used (no sampling, no shuffling), and
the model is written from memory, so no temporary path is recorded inside it. (The model embeds
its trainer settings, ``num_threads`` included, so a different thread count gives different
bytes.) SentencePiece's own normalization is off (``identity``): :mod:`asrflow.text` is the only
normalization.

Token list (ESPnet convention), one token per line::

    <blank>          id 0 (CTC blank; SentencePiece's pad piece, a control symbol)
    <unk>            id 1 (SentencePiece's unknown piece)
    ▁the             every other SentencePiece piece, in SentencePiece id order
    ...
    <sos/eos>        last

ESPnet maps text to pieces with the model and pieces to ids with this list, so the list holds
every piece exactly once. Because the model reserves ids 0 and 1 for ``<blank>`` and ``<unk>``,
a piece's line number (from 0) equals its SentencePiece id.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import sentencepiece as spm

from asrflow.data.cuts import load_cuts, text
from asrflow.errors import AsrflowError
from asrflow.io import write_bytes, write_text
from asrflow.settings import known_settings, schema_defaults
from asrflow.text import TextNormalization, normalize
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

MODEL_TYPES = ("unigram", "bpe", "char")
AUTO = "auto"
"""``model_type: auto``: the type and size from the training text (:func:`auto_tokenizer`)."""
BLANK = "<blank>"
UNK = "<unk>"
SOS_EOS = "<sos/eos>"
RESERVED = (BLANK, UNK, SOS_EOS)
WORD_BOUNDARY = "\u2581"
"""SentencePiece's word-boundary mark ``▁``."""

_CHAR_VOCAB_SIZE = 1 << 20
"""Upper bound passed for ``char`` models: their vocabulary is every covered character."""


_DEFAULT = schema_defaults("tokenizers.*")


@dataclass(frozen=True)
class TokenizerConfig:
    """Settings of one tokenizer (``tokenizers.<name>`` in the config).

    - ``model_type``: ``unigram``, ``bpe`` or ``char``; ``auto``: chosen from the training text
      when the tokenizer is trained (:func:`auto_tokenizer`, its reason in the summary);
    - ``vocab_size``: SentencePiece vocabulary size, ``<blank>`` and ``<unk>`` included (the
      token list has one more line, ``<sos/eos>``). Ignored for ``char``, whose vocabulary is
      every character kept by ``character_coverage``;
    - ``character_coverage``: share of training characters the vocabulary must cover; rarer
      characters become ``<unk>`` (1.0 keeps them all; lower it for scripts with huge
      alphabets);
    - ``user_symbols``: pieces never split, e.g. ``("<noise>",)``;
    - ``max_piece_length``: longest piece in characters (SentencePiece's default, 16).
    """

    model_type: str = _DEFAULT["model_type"]
    vocab_size: int = _DEFAULT["vocab_size"]
    character_coverage: float = _DEFAULT["character_coverage"]
    user_symbols: tuple[str, ...] = _DEFAULT["user_symbols"]
    max_piece_length: int = _DEFAULT["max_piece_length"]

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_symbols", tuple(self.user_symbols))
        if self.model_type not in (*MODEL_TYPES, AUTO):
            raise AsrflowError(
                f"tokenizer model_type must be one of {', '.join((*MODEL_TYPES, AUTO))}, "
                f"got {self.model_type!r}"
            )
        if not isinstance(self.vocab_size, int) or isinstance(self.vocab_size, bool):
            raise AsrflowError(f"tokenizer vocab_size must be an integer, got {self.vocab_size!r}")
        if self.vocab_size < 3:
            raise AsrflowError(f"tokenizer vocab_size must be at least 3, got {self.vocab_size}")
        cov = self.character_coverage
        if isinstance(cov, bool) or not isinstance(cov, int | float) or not 0.0 < cov <= 1.0:
            raise AsrflowError(
                f"tokenizer character_coverage must be in (0, 1], got {self.character_coverage!r}"
            )
        if not isinstance(self.max_piece_length, int) or self.max_piece_length < 1:
            raise AsrflowError(
                f"tokenizer max_piece_length must be a positive integer, "
                f"got {self.max_piece_length!r}"
            )
        for sym in self.user_symbols:
            if not isinstance(sym, str) or not sym or sym.split() != [sym]:
                raise AsrflowError(
                    f"tokenizer user_symbols: {sym!r} must be a non-empty string without spaces"
                )
            if sym in RESERVED:
                raise AsrflowError(
                    f"tokenizer user_symbols: {sym!r} is reserved by the token list "
                    f"({', '.join(RESERVED)})"
                )
        if len(set(self.user_symbols)) != len(self.user_symbols):
            raise AsrflowError(f"tokenizer user_symbols has duplicates: {self.user_symbols}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (``user_symbols`` as a list)."""
        d = asdict(self)
        d["user_symbols"] = list(self.user_symbols)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> TokenizerConfig:
        """Settings from a config mapping; missing keys take defaults, unknown keys are errors."""
        d = known_settings(cls, d, "tokenizer")
        if "user_symbols" in d:
            d["user_symbols"] = tuple(d["user_symbols"] or ())
        return cls(**d)


CHAR_UP_TO_WORDS = 100
"""A vocabulary of at most this many distinct words is spelled in characters (``auto``)."""


def auto_tokenizer(
    config: TokenizerConfig, sentences: Sequence[str], hours: float
) -> tuple[TokenizerConfig, str]:
    """``model_type: auto`` made concrete from the training text, and the reason.

    - At most :data:`CHAR_UP_TO_WORDS` distinct words (digits, commands, yes/no): characters.
      Every word is seen many times, and a closed vocabulary is decoded with the lexicon
      (icefall's yesno and Kaldi's TIDIGITS recipes model such tasks below the word level).
    - Otherwise a unigram model, 300 pieces below 2 h of audio (the demo's measurement on 1 h:
      dev WER 18.7 % at 300 against 23.9 % at 100, 18.1 % at the 446 its text allowed), 500
      from 2 h (icefall's LibriSpeech CTC and transducer recipes use 500 BPE pieces), each cut
      to what the text allows (SentencePiece refuses more pieces than it can form).
    """
    if config.model_type != AUTO:
        return config, ""
    words = {w for s in sentences for w in s.split()}
    if len(words) <= CHAR_UP_TO_WORDS:
        reason = f"{len(words)} distinct words (<= {CHAR_UP_TO_WORDS}): characters"
        return replace(config, model_type="char"), reason
    size = 300 if hours < 2 else 500
    chars = len({c for s in sentences for c in s.replace(" ", "")})
    most = _most_pieces(sentences, config)
    chosen = max(chars + 3, min(size, most))
    reason = f"{len(words)} distinct words, {hours:.2f} h: unigram {size}" + (
        f", cut to the {chosen} its text allows" if chosen != size else ""
    )
    return replace(config, model_type="unigram", vocab_size=chosen), reason


def _most_pieces(sentences: Sequence[str], config: TokenizerConfig) -> int:
    """The most unigram pieces SentencePiece can make of ``sentences`` (a trial run)."""
    trial = replace(config, model_type="unigram", vocab_size=_CHAR_VOCAB_SIZE)
    try:
        _train(sentences, trial, "auto")
    except AsrflowError as e:
        found = re.search(r"allows at most (\d+)", str(e))
        if found:
            return int(found.group(1))
        raise
    return _CHAR_VOCAB_SIZE


def train_tokenizer(
    train_cuts: Pathlike,
    model_out: Pathlike,
    tokens_out: Pathlike,
    config: TokenizerConfig,
    normalization: TextNormalization,
    *,
    name: str | None = None,
) -> dict[str, Any]:
    """Train a SentencePiece model on the train cuts; write the model and its token list.

    ``name`` is the tokenizer's key in the config, used in error messages
    (``tokenizers.<name>.vocab_size``). Returns a JSON-ready summary: ``num_cuts``,
    ``num_sentences``, ``num_empty`` (cuts skipped as empty after normalization), ``num_chars``,
    ``num_distinct_chars``, ``vocab_size`` (pieces in the model), ``num_tokens`` (lines in the
    token list), ``char_coverage`` (share of non-space training characters the vocabulary
    covers), ``unk_rate`` (share of ``<unk>`` pieces over the encoded training text),
    ``tokens_per_sentence``, ``model_sha256``, ``normalization_sha256`` and ``config``.
    """
    key = f"tokenizers.{name or '<name>'}"
    cuts = load_cuts(train_cuts)
    sentences: list[str] = []
    num_cuts = 0
    for cut in cuts:
        num_cuts += 1
        sentence = normalize(text(cut), normalization)
        if sentence:
            sentences.append(sentence)
    if not sentences:
        raise AsrflowError(
            f"{train_cuts}: no training text for tokenizer {key}: all {num_cuts} train cut(s) are "
            "empty after text normalization; check the train split and the transcripts"
        )

    hours = sum(float(cut.duration) for cut in cuts) / 3600
    config, auto_reason = auto_tokenizer(config, sentences, hours)
    if auto_reason:
        log.info("tokenizer %s: model_type auto -> %s (%s)", key, config.model_type, auto_reason)
    model_bytes = _train(sentences, config, key)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    tokens = _token_list(sp)
    write_bytes(model_out, model_bytes)
    write_text(tokens_out, "\n".join(tokens) + "\n")

    summary = _summary(sp, sentences, num_cuts, tokens, config, normalization)
    summary["model_sha256"] = hashlib.sha256(model_bytes).hexdigest()
    if auto_reason:
        summary["auto"] = {"model_type": config.model_type, "reason": auto_reason}
    log.info(
        "tokenizer %s (%s): %d sentence(s) from %d cut(s) (%d empty skipped), %d pieces, "
        "%d tokens in list, char coverage %.4f, <unk> rate %.4f, %.1f tokens/sentence -> %s",
        key,
        config.model_type,
        summary["num_sentences"],
        num_cuts,
        summary["num_empty"],
        summary["vocab_size"],
        summary["num_tokens"],
        summary["char_coverage"],
        summary["unk_rate"],
        summary["tokens_per_sentence"],
        model_out,
    )
    return summary


def token_list(model_path: Pathlike) -> list[str]:
    """The ESPnet token list of a SentencePiece model (see the module docstring)."""
    return _token_list(spm.SentencePieceProcessor(model_file=str(model_path)))


def _token_list(sp: spm.SentencePieceProcessor) -> list[str]:
    pieces = [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))
    ]
    clash = sorted(set(pieces).intersection(RESERVED))
    if clash:
        raise AsrflowError(f"tokenizer model has a piece named {clash[0]!r}, reserved by the list")
    return [BLANK, UNK, *pieces, SOS_EOS]


def _train(sentences: Sequence[str], config: TokenizerConfig, key: str) -> bytes:
    """Run the SentencePiece trainer in memory, deterministically; translate its errors."""
    char = config.model_type == "char"
    longest = max(len(s.encode("utf-8")) for s in sentences)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=config.model_type,
            vocab_size=_CHAR_VOCAB_SIZE if char else config.vocab_size,
            character_coverage=config.character_coverage,
            user_defined_symbols=list(config.user_symbols),
            max_sentencepiece_length=config.max_piece_length,
            pad_id=0,
            pad_piece=BLANK,
            unk_id=1,
            unk_piece=UNK,
            bos_id=-1,
            eos_id=-1,
            normalization_rule_name="identity",
            num_threads=1,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            max_sentence_length=max(4192, longest + 1),
            minloglevel=1,
        )
    except RuntimeError as e:
        raise _translate(e, config, key, len(sentences)) from e
    return model.getvalue()


def _translate(e: RuntimeError, config: TokenizerConfig, key: str, n: int) -> Exception:
    """A user-facing error for SentencePiece's vocabulary-size failures; other errors as is."""
    msg = str(e)
    high = re.search(r"Vocabulary size too high \((\d+)\).*?<= (\d+)", msg)
    if high:
        return AsrflowError(
            f"{key}.vocab_size = {config.vocab_size} is too high for the training text "
            f"({n} sentence(s)): SentencePiece ({config.model_type}) allows at most "
            f"{high.group(2)}; lower {key}.vocab_size (or train on more text)"
        )
    low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
    if low:
        return AsrflowError(
            f"{key}.vocab_size = {config.vocab_size} is too low: the training text needs "
            f"{low.group(2)} characters plus <blank>/<unk> and user symbols; raise "
            f"{key}.vocab_size or lower {key}.character_coverage"
        )
    return e


def _summary(
    sp: spm.SentencePieceProcessor,
    sentences: Sequence[str],
    num_cuts: int,
    tokens: Sequence[str],
    config: TokenizerConfig,
    normalization: TextNormalization,
) -> dict[str, Any]:
    chars: Counter[str] = Counter()
    for s in sentences:
        chars.update(s.replace(" ", ""))
    # SentencePiece keeps every covered character as a one-character piece.
    special = set(RESERVED).union(config.user_symbols)
    stripped = (t.replace(WORD_BOUNDARY, "") for t in tokens if t not in special)
    covered = {t for t in stripped if len(t) == 1}
    total = sum(chars.values())
    num_covered = sum(n for c, n in chars.items() if c in covered)
    encoded = sp.encode(list(sentences))
    num_pieces = sum(len(ids) for ids in encoded)
    num_unk = sum(1 for ids in encoded for i in ids if i == sp.unk_id())
    return {
        "model_type": config.model_type,
        "num_cuts": num_cuts,
        "num_sentences": len(sentences),
        "num_empty": num_cuts - len(sentences),
        "num_chars": total,
        "num_distinct_chars": len(chars),
        "vocab_size": sp.get_piece_size(),
        "num_tokens": len(tokens),
        "char_coverage": round(num_covered / total, 6) if total else 1.0,
        "unk_rate": round(num_unk / num_pieces, 6) if num_pieces else 0.0,
        "tokens_per_sentence": round(num_pieces / len(sentences), 3),
        "normalization_sha256": normalization.sha256(),
        "config": config.to_dict(),
    }
