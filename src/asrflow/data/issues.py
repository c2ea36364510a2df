"""What a validation check yields and is configured by: :class:`Issue` (one finding, naming the
manifest line, the item and what to do) and :class:`ValidationConfig`, with the helpers the checks
(:mod:`asrflow.data.checks`, :mod:`asrflow.data.audio_checks`) build their issues with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lhotse.cut import Cut

from asrflow.data.cuts import origin
from asrflow.settings import schema_defaults
from asrflow.types import Seconds

Splits = Mapping[str, Sequence[Cut]]

EXAMPLES = 5


_DEFAULT = schema_defaults("corpora.*.validation")


@dataclass(frozen=True)
class ValidationConfig:
    """Settings of the validation rule (``corpora.<name>.validation`` in the config; defaults
    the schema's). ``threads`` is a resource the rule sets, not a config key."""

    duration_tolerance: Seconds = _DEFAULT["duration_tolerance"]
    full_decode: bool = _DEFAULT["full_decode"]
    group_fields: tuple[str, ...] = _DEFAULT["group_fields"]
    allow_group_overlap: tuple[str, ...] = _DEFAULT["allow_group_overlap"]
    threads: int = 16

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ValidationConfig:
        d = dict(d)
        for key in ("group_fields", "allow_group_overlap"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass(frozen=True)
class Issue:
    """One finding: ``where`` is ``"<manifest>:<line>"`` (or a split name for split-wide ones)."""

    severity: str  # "error" | "warning"
    code: str
    split: str
    where: str
    item: str
    message: str
    hint: str

    def format(self) -> str:
        return f"{self.where} [{self.split}] {self.item}: {self.message} -> {self.hint}"


def make_issue(severity: str, code: str, split: str, cut: Cut, message: str, hint: str) -> Issue:
    """An issue of one utterance, placed at its manifest line."""
    return Issue(severity, code, split, origin(cut), f"utterance {cut.id}", message, hint)


def audio_path(cut: Cut) -> str:
    return str(cut.recording.sources[0].source)


def convention_issue(code: str, split: str, message: str, hint: str) -> Issue:
    """A warning about a split's transcripts as a whole (case, digits, unseen characters)."""
    return Issue("warning", code, split, split, "transcripts", message, hint)


def examples_text(cuts: Sequence[Cut]) -> str:
    """The manifest lines of the first few ``cuts``, for a message."""
    return ", ".join(origin(c) for c in cuts[:EXAMPLES])
