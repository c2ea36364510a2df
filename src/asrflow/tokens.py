"""Text <-> token IDs for training, exactly as ESPnet maps them.

ESPnet turns a transcript into pieces with the SentencePiece model and pieces into IDs with the
token list (``tokens.txt``); a piece missing from the list becomes ``<unk>``. The two files are
produced together by :func:`asrflow.tokenizer.train_tokenizer`; a model paired with another
run's token list would train on silently shifted IDs, so :class:`TokenEncoder` checks the pairing
when it is built and refuses a mismatch.

Example::

    enc = TokenEncoder("bpe.model", "tokens.txt", TextNormalization())
    ids = enc.encode("Hello, World!")      # normalized first: "hello world"
    enc.decode(ids)                        # "hello world"
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sentencepiece as spm

from asrflow.errors import AsrflowError
from asrflow.text import DEFAULT, TextNormalization, normalize
from asrflow.tokenizer import BLANK, SOS_EOS, UNK, WORD_BOUNDARY, token_list
from asrflow.types import Pathlike

IGNORE_ID = -1
"""Padding value of target sequences (ESPnet's ``ignore_id``)."""


class TokenListMismatch(AsrflowError):
    """A SentencePiece model and a ``tokens.txt`` that do not belong together."""


class TokenEncoder:
    """Encode normalized text to ESPnet token IDs and decode IDs back to text."""

    ignore_id: int = IGNORE_ID

    def __init__(
        self,
        bpe_model: Pathlike,
        tokens_txt: Pathlike,
        normalization: TextNormalization = DEFAULT,
    ) -> None:
        self.bpe_model = Path(bpe_model)
        self.tokens_txt = Path(tokens_txt)
        self.normalization = normalization
        try:
            model_proto = self.bpe_model.read_bytes()
            self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        except (OSError, RuntimeError) as exc:
            raise AsrflowError(
                f"cannot load the SentencePiece model {self.bpe_model}: {exc}; "
                "retrain the tokenizer"
            ) from exc
        try:
            lines = self.tokens_txt.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise AsrflowError(f"cannot read the token list {self.tokens_txt}: {exc}") from exc
        self.tokens: list[str] = lines
        self._check_pairing()
        self._ids = {tok: i for i, tok in enumerate(self.tokens)}
        self.blank_id: int = self._ids[BLANK]
        self.unk_id: int = self._ids[UNK]
        self.sos_eos_id: int = self._ids[SOS_EOS]
        self._dropped = frozenset((self.blank_id, self.sos_eos_id))

    def _check_pairing(self) -> None:
        """Raise unless the token list is exactly the model's ESPnet token list."""
        expected = token_list(self.bpe_model)
        if self.tokens == expected:
            return
        problem = _first_difference(self.tokens, expected)
        index = first_index(self.tokens, expected)
        raise TokenListMismatch(
            f"tokenizer/token-list mismatch: {self.tokens_txt} does not belong to "
            f"{self.bpe_model} ({problem}; the lists first differ at token ID {index}, line "
            f"{index + 1}: "
            f"{_at(self.tokens, index)} in {self.tokens_txt.name}, {_at(expected, index)} from "
            "the model's pieces); retrain the tokenizer or point the run at the matching "
            "tokens.txt"
        )

    @property
    def vocab_size(self) -> int:
        """Number of tokens in the list (the model's output dimension)."""
        return len(self.tokens)

    def pieces(self, text: str) -> list[str]:
        """The SentencePiece pieces of the normalized ``text``."""
        return self._sp.encode(normalize(text, self.normalization), out_type=str)

    def spell(self, word: str) -> list[str]:
        """The SentencePiece pieces of ``word`` as it is (already normalized)."""
        return self._sp.encode(word, out_type=str)

    def encode(self, text: str) -> list[int]:
        """Token IDs of ``text`` (normalized first); pieces not in the list map to ``<unk>``."""
        unk = self.unk_id
        return [self._ids.get(p, unk) for p in self.pieces(text)]

    def unknown_words(self, text: str) -> list[tuple[str, int]]:
        """The words of the normalized ``text`` that :meth:`encode` spells with ``<unk>``, each
        with its number of ``<unk>`` tokens (in order, repeats kept): what this tokenizer
        cannot write."""
        unk = self.unk_id
        out = []
        for word in normalize(text, self.normalization).split():
            n = sum(1 for p in self.spell(word) if self._ids.get(p, unk) == unk)
            if n:
                out.append((word, n))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Text of token IDs: ``<blank>`` and ``<sos/eos>`` dropped, ``▁`` read as a space."""
        n = len(self.tokens)
        pieces = []
        for i in ids:
            i = int(i)
            if i in self._dropped or i == self.ignore_id:
                continue
            if not 0 <= i < n:
                raise ValueError(f"token ID {i} is outside the token list (0..{n - 1})")
            pieces.append(self.tokens[i])
        return " ".join("".join(pieces).replace(WORD_BOUNDARY, " ").split())

    def __getstate__(self) -> dict[str, Any]:
        """Picklable state (DataLoader workers under ``spawn``): the model travels as bytes."""
        state = self.__dict__.copy()
        state["_sp"] = self._sp.serialized_model_proto()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        state["_sp"] = spm.SentencePieceProcessor(model_proto=state["_sp"])
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"TokenEncoder({str(self.bpe_model)!r}, {str(self.tokens_txt)!r}, "
            f"vocab_size={self.vocab_size})"
        )


def first_index(actual: list[str], expected: list[str]) -> int:
    """The first index where the lists differ (the shorter one's length if one is a prefix)."""
    return next(
        (i for i, (a, e) in enumerate(zip(actual, expected, strict=False)) if a != e),
        min(len(actual), len(expected)),
    )


def _at(tokens: list[str], index: int) -> str:
    return repr(tokens[index]) if index < len(tokens) else "(end of list)"


def _first_difference(actual: list[str], expected: list[str]) -> str:
    """A short description of where a token list departs from the expected one."""
    seen: dict[str, int] = {}
    for i, tok in enumerate(actual):
        if tok in seen:
            return f"{tok!r} appears twice, on lines {seen[tok] + 1} and {i + 1}"
        seen[tok] = i
    missing = [t for t in expected if t not in seen]
    if missing:
        return f"{len(missing)} model piece(s) missing from the list, e.g. {missing[0]!r}"
    extra = [t for t in actual if t not in set(expected)]
    if extra:
        where = seen[extra[0]] + 1
        return f"{len(extra)} token(s) not in the model, e.g. {extra[0]!r} on line {where}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a != e:
            return f"line {i + 1} is {a!r}, the model's order needs {e!r}"
    return "the lists differ"  # pragma: no cover - equal sets and order mean equal lists


def greedy_ctc(frame_ids: Any, lengths: Any, blank: int) -> list[list[int]]:
    """Token IDs of greedy CTC decoding: per utterance, the frame-wise argmax IDs (a ``(B, T)``
    tensor or nested list) up to its length, repeats collapsed and blanks dropped. Training's
    validation and the standalone evaluation decode with this same function."""
    out = []
    rows = frame_ids.tolist() if hasattr(frame_ids, "tolist") else frame_ids
    ns = lengths.tolist() if hasattr(lengths, "tolist") else lengths
    for row, n in zip(rows, ns, strict=True):
        ids, prev = [], None
        for t in row[:n]:
            if t != prev and t != blank:
                ids.append(t)
            prev = t
        out.append(ids)
    return out
