"""What a plan knows of a corpus: statistics of the train split a run reads.

Read from the filtered train cuts (what training reads, so the plan and the model agree) with
the text normalized as the tokenizer and the scorer see it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from asrflow.text import TextNormalization, normalize
from asrflow.types import Pathlike


@dataclass(frozen=True)
class CorpusStats:
    """Statistics of a run's train split (all its train corpora together)."""

    hours: float
    utterances: int
    speakers: int | None
    """Distinct ``speaker`` values; ``None`` when no cut names its speaker."""
    median_duration: float
    """Seconds."""
    rate_seconds: Mapping[int, float]
    """Sampling rate (Hz) -> seconds of audio at that rate."""
    characters: int
    """Distinct characters of the normalized text (spaces not counted)."""
    words: int
    """Distinct words of the normalized text."""
    running_words: int
    synthetic: bool
    """Every train corpus is synthetic speech (``source: synthetic``, the eSpeak demo)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rate_seconds"] = {str(k): round(v, 3) for k, v in sorted(self.rate_seconds.items())}
        d["hours"] = round(self.hours, 4)
        d["median_duration"] = round(self.median_duration, 3)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CorpusStats:
        data = dict(d)
        data["rate_seconds"] = {int(k): float(v) for k, v in d["rate_seconds"].items()}
        return cls(**data)


@dataclass(frozen=True)
class Utterance:
    """What the statistics read of one cut."""

    duration: float
    sampling_rate: int
    text: str
    speaker: str | None


def stats_of(utterances: Iterable[Utterance], *, synthetic: bool) -> CorpusStats:
    """The statistics of ``utterances`` (texts already normalized)."""
    durations: list[float] = []
    rates: Counter[int] = Counter()
    chars: set[str] = set()
    words: Counter[str] = Counter()
    speakers: set[str] = set()
    for u in utterances:
        durations.append(u.duration)
        rates[u.sampling_rate] += u.duration
        chars.update(u.text.replace(" ", ""))
        words.update(u.text.split())
        if u.speaker:
            speakers.add(u.speaker)
    return CorpusStats(
        hours=sum(durations) / 3600,
        utterances=len(durations),
        speakers=len(speakers) or None,
        median_duration=statistics.median(durations) if durations else 0.0,
        rate_seconds=dict(rates),
        characters=len(chars),
        words=len(words),
        running_words=sum(words.values()),
        synthetic=synthetic,
    )


def train_stats(
    cut_files: Sequence[Pathlike], normalization: TextNormalization, *, synthetic: bool
) -> CorpusStats:
    """The statistics of the filtered train splits ``cut_files``."""
    from asrflow.data.cuts import load_cuts, supervision  # Lhotse (and torch) in the plan job only

    def utterances() -> Iterable[Utterance]:
        for path in cut_files:
            for cut in load_cuts(path):
                sup = supervision(cut)
                yield Utterance(
                    duration=float(cut.duration),
                    sampling_rate=int(cut.sampling_rate),
                    text=normalize(sup.text or "", normalization),
                    speaker=sup.speaker,
                )

    return stats_of(utterances(), synthetic=synthetic)
