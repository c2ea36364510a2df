"""Two evaluations of one eval set, paired by utterance ID: the per-utterance word errors of
each (from its ``utterances.csv``) and the paired bootstrap interval of their WER difference
(:func:`asrflow.evaluate.intervals.difference_interval`).

Both the choice on dev (:mod:`asrflow.select.choose`) and the comparison report
(:mod:`asrflow.report.differences`) pair evaluations this way. Two evaluations pair only when
they list the same utterance IDs with the same reference word counts.

Example::

    a = read_utterance_errors("results/runs/r/eval/valid.loss.ave_3best/demo.dev/utterances.csv")
    b = read_utterance_errors("results/runs/r/eval/valid.loss.best/demo.dev/utterances.csv")
    diff, low, high = paired_difference(a, b)   # WER a minus WER b, fractions

Seed replicas of a system (the same recipe trained with different seeds) pair the same way, all
of them at once: :func:`replicated_difference` gives their mean WER, or the difference of two
systems' mean WERs, with an interval over utterances and seeds
(:func:`asrflow.evaluate.intervals.replicated_interval`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from asrflow.errors import AsrflowError
from asrflow.evaluate.intervals import (
    BOOTSTRAP,
    Bootstrap,
    difference_interval,
    replicated_interval,
)
from asrflow.types import Pathlike


@dataclass(frozen=True)
class UtteranceErrors:
    """Word errors and reference words per utterance (``ids``) of one evaluation."""

    ids: np.ndarray
    word_errors: np.ndarray
    ref_words: np.ndarray

    def by_id(self) -> UtteranceErrors:
        """The same utterances sorted by ID."""
        order = np.argsort(self.ids, kind="stable")
        return UtteranceErrors(self.ids[order], self.word_errors[order], self.ref_words[order])


def read_utterance_errors(path: Pathlike) -> UtteranceErrors:
    """The ``id``, ``word_errors`` and ``ref_words`` columns of an evaluation's
    ``utterances.csv`` (:func:`asrflow.evaluate.scoring.write_utterances_csv`), sorted by ID
    (IDs are text: ``"NA"`` or ``"007"`` stay as written)."""
    columns = ["id", "word_errors", "ref_words"]
    try:
        table = pd.read_csv(
            path, usecols=columns, dtype={"id": str}, keep_default_na=False, na_values={}
        )
    except (OSError, ValueError) as e:
        raise AsrflowError(f"{path}: not an evaluation's utterances.csv ({e})") from e
    if table["id"].duplicated().any():
        twice = table.loc[table["id"].duplicated(), "id"].iloc[0]
        raise AsrflowError(f"{path}: utterance {twice!r} is listed more than once")
    table = table.sort_values("id", kind="stable")
    return UtteranceErrors(
        ids=table["id"].to_numpy(dtype=object),
        word_errors=table["word_errors"].to_numpy(dtype=np.int64),
        ref_words=table["ref_words"].to_numpy(dtype=np.int64),
    )


def paired_difference(
    a: UtteranceErrors, b: UtteranceErrors, bootstrap: Bootstrap = BOOTSTRAP
) -> tuple[float, float, float] | None:
    """``(diff, low, high)`` of WER ``a`` minus WER ``b``, utterances paired by ID; ``None``
    when the two did not score the same utterances with the same reference word counts."""
    a, b = a.by_id(), b.by_id()
    if not np.array_equal(a.ids, b.ids) or not np.array_equal(a.ref_words, b.ref_words):
        return None
    if not len(a.ids) or not a.ref_words.sum():
        return None
    return difference_interval(
        a.word_errors,
        b.word_errors,
        a.ref_words,
        resamples=bootstrap.resamples,
        seed=bootstrap.seed,
        level=bootstrap.level,
    )


def replicated_difference(
    a: Sequence[UtteranceErrors],
    b: Sequence[UtteranceErrors] | None = None,
    bootstrap: Bootstrap = BOOTSTRAP,
) -> tuple[float, float, float] | None:
    """``(value, low, high)``: the mean WER of the replicas ``a`` (evaluations of one system
    trained with different seeds), or with ``b`` (another system's replicas) the mean WER of
    ``a`` minus that of ``b``, utterances paired by ID, with the interval of
    :func:`~asrflow.evaluate.intervals.replicated_interval` (utterances and seeds resampled).
    ``None`` unless every evaluation scored the same utterances with the same reference word
    counts. One evaluation per side gives exactly :func:`paired_difference`."""
    runs = [e.by_id() for e in [*a, *(b or ())]]
    if not a or (b is not None and not b):
        return None
    first = runs[0]
    for other in runs[1:]:
        if not np.array_equal(other.ids, first.ids) or not np.array_equal(
            other.ref_words, first.ref_words
        ):
            return None
    if not len(first.ids) or not first.ref_words.sum():
        return None
    errors = np.stack([r.word_errors for r in runs])
    return replicated_interval(
        errors[: len(a)],
        first.ref_words,
        errors[len(a) :] if b is not None else None,
        resamples=bootstrap.resamples,
        seed=bootstrap.seed,
        level=bootstrap.level,
    )
