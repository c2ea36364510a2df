"""The one text normalization of asrflow, shared by the tokenizer, training and scoring.

Transcripts are stored raw (see :mod:`asrflow.data.cuts`); every consumer that needs comparable
text calls :func:`normalize` with the same :class:`TextNormalization`, and records
:meth:`TextNormalization.sha256` next to its result so that it is known which contract produced
it.

Steps, in order:

1. Unicode normalization (``unicode_form``, NFKC by default: compatibility forms such as
   full-width letters or ligatures are folded, accents are kept: ``"canción"`` stays);
2. typographic apostrophes (``’ ‘ ʼ``) become ``'`` (``unify_apostrophes``);
3. lowercasing (``str.lower``, not ``casefold``: ``ß`` stays ``ß``); steps 1-3 are repeated
   until the text no longer changes, which keeps :func:`normalize` idempotent;
4. punctuation removal: every character of a Unicode ``P*`` category becomes a space, except
   those in ``keep``; a ``keep`` character survives only *inside* a word (a letter, digit or
   combining mark on both sides): ``"don't"`` stays, ``"'hola'"`` becomes ``"hola"``;
5. whitespace: ends stripped, inner runs collapsed to one space (``collapse_whitespace``);
6. ``replacements``: whole-word map of accepted alternative spellings (``{"ok": "okay"}``).

Symbols (``S*``: ``$ + = €``) are not punctuation and are kept; ``% & @ #`` are (``Po``).

Example::

    >>> normalize("  ¡Hola, señor O’Brien!  ")
    "hola señor o'brien"
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.settings import known_settings, schema_defaults

UNICODE_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
APOSTROPHE_VARIANTS = "\u2019\u2018\u02bc"
"""Right/left single quotation marks and the modifier letter apostrophe."""


_APOSTROPHE_TABLE = str.maketrans({c: "'" for c in APOSTROPHE_VARIANTS})


@lru_cache(maxsize=4096)
def _category(ch: str) -> str:
    return unicodedata.category(ch)


def _is_word_char(ch: str) -> bool:
    return _category(ch)[0] in "LNM"


def _word_pattern(replacements: Mapping[str, str]) -> re.Pattern[str] | None:
    """A compiled whole-word alternation of the replacement keys, longest first."""
    if not replacements:
        return None
    words = sorted(replacements, key=lambda w: (-len(w), w))
    alternation = "|".join(re.escape(w) for w in words)
    return re.compile(rf"(?<!\S)(?:{alternation})(?!\S)")


_DEFAULT = schema_defaults("text_normalization")


@dataclass(frozen=True)
class TextNormalization:
    """Settings of :func:`normalize`; hashable, comparable and serializable.

    ``replacements`` maps one normalized word to its accepted spelling (one or more normalized
    words, or ``""`` to drop the word). Keys must already be normalized single words, and no
    replacement may produce a key, so that normalization stays idempotent.
    """

    lowercase: bool = _DEFAULT["lowercase"]
    strip_punctuation: bool = _DEFAULT["strip_punctuation"]
    keep: str = _DEFAULT["keep"]
    collapse_whitespace: bool = _DEFAULT["collapse_whitespace"]
    unicode_form: str = _DEFAULT["unicode_form"]
    unify_apostrophes: bool = _DEFAULT["unify_apostrophes"]
    replacements: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("lowercase", "strip_punctuation", "collapse_whitespace", "unify_apostrophes"):
            if not isinstance(getattr(self, name), bool):
                raise AsrflowError(
                    f"text normalization: {name} must be true or false, got {getattr(self, name)!r}"
                )
        if not isinstance(self.keep, str) or any(_category(c)[0] != "P" for c in self.keep):
            raise AsrflowError(
                f"text normalization: keep must be a string of punctuation characters, "
                f"got {self.keep!r}"
            )
        if self.unicode_form not in UNICODE_FORMS:
            raise AsrflowError(
                f"text normalization: unicode_form must be one of {', '.join(UNICODE_FORMS)}, "
                f"got {self.unicode_form!r}"
            )
        for key, value in dict(self.replacements).items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise AsrflowError(
                    f"text normalization: replacement {key!r}: {value!r} must map a string "
                    "to a string"
                )
        # A sorted plain copy (picklable, unlike a mappingproxy); treat it as read-only.
        object.__setattr__(self, "replacements", dict(sorted(dict(self.replacements).items())))
        self._check_replacements()
        object.__setattr__(self, "_pattern", _word_pattern(self.replacements))

    def _check_replacements(self) -> None:
        if not self.replacements:
            return
        base = _without_replacements(self)
        keys = set(self.replacements)
        for key, value in self.replacements.items():
            if not key or len(key.split()) != 1 or _normalize_base(key, base) != key:
                raise AsrflowError(
                    f"text normalization: replacement key {key!r} must be a single normalized "
                    f"word (normalized it reads {_normalize_base(key, base)!r})"
                )
            if _normalize_base(value, base) != value:
                raise AsrflowError(
                    f"text normalization: replacement {key!r} -> {value!r}: the value must be "
                    f"normalized text, e.g. {_normalize_base(value, base)!r}"
                )
            clash = sorted(keys.intersection(value.split()))
            if clash:
                raise AsrflowError(
                    f"text normalization: replacement {key!r} -> {value!r} produces "
                    f"{clash[0]!r}, which is itself replaced; map {key!r} to the final spelling"
                )

    def __hash__(self) -> int:
        return hash(self.sha256())

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready settings (``replacements`` as a sorted dict)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["replacements"] = dict(self.replacements)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> TextNormalization:
        """Settings from a config mapping; missing keys take defaults, unknown keys are errors."""
        d = known_settings(cls, d, "text normalization")
        if "replacements" in d:
            d["replacements"] = dict(d["replacements"] or {})
        return cls(**d)

    def sha256(self) -> str:
        """Hex SHA-256 of the canonical JSON of :meth:`to_dict` (sorted keys, ASCII, compact)."""
        canonical = json.dumps(
            self.to_dict(), sort_keys=True, ensure_ascii=True, separators=(",", ":")
        )
        return hashlib.sha256(canonical.encode("ascii")).hexdigest()


DEFAULT = TextNormalization()


def normalize(text: str, norm: TextNormalization = DEFAULT) -> str:
    """Normalize ``text`` under ``norm``; idempotent: ``normalize(normalize(x)) == normalize(x)``.

    >>> normalize("Don't   STOP!")
    "don't stop"
    """
    out = _normalize_base(text, norm)
    if norm.replacements:
        out = norm._pattern.sub(lambda m: norm.replacements[m.group(0)], out)
        out = " ".join(out.split()) if norm.collapse_whitespace else out.strip()
    return out


def _normalize_base(text: str, norm: TextNormalization) -> str:
    """Steps 1-5 (everything but ``replacements``)."""
    # Unicode form, apostrophes and case can each undo another (lowercasing can leave text outside
    # the Unicode form); repeat them to a fixpoint so that normalization is idempotent.
    out = text
    for _ in range(8):
        step = _unicode(out, norm.unicode_form)
        if norm.unify_apostrophes:
            step = step.translate(_APOSTROPHE_TABLE)
        if norm.lowercase:
            step = step.lower()
        if step == out:
            break
        out = step
    if norm.strip_punctuation:
        out = _strip_punctuation(out, norm.keep)
    return " ".join(out.split()) if norm.collapse_whitespace else out.strip()


def _unicode(text: str, form: str) -> str:
    return unicodedata.normalize(form, text)


def _strip_punctuation(text: str, keep: str) -> str:
    """Replace punctuation with spaces; keep ``keep`` characters only between word characters."""
    chars = [" " if _category(c)[0] == "P" and c not in keep else c for c in text]
    if keep:
        snapshot = list(chars)
        last = len(snapshot) - 1
        for i, c in enumerate(snapshot):
            if c in keep and not (
                0 < i < last and _is_word_char(snapshot[i - 1]) and _is_word_char(snapshot[i + 1])
            ):
                chars[i] = " "
    return "".join(chars)


def _without_replacements(norm: TextNormalization) -> TextNormalization:
    return TextNormalization(
        **{f.name: getattr(norm, f.name) for f in fields(norm) if f.name != "replacements"}
    )
