"""What of an eval set is scored: all of it, unless ``evaluation.filter`` says otherwise.

An eval set is judged *whole*: the evaluate rule reads its split's validated cuts, not the cuts
the training filter (``corpora.<c>.filter``, :mod:`asrflow.data.filter`) kept, so a 40-s test
recording is scored like a 4-s one, and changing the training filter changes no eval set.
``evaluation.filter`` (default: none) may exclude utterances from every eval set on purpose,
with the same bounds and reasons as the training filter (checked against the scoring contract's
normalization); whatever it excludes is counted in the evaluation summary (:func:`coverage`:
``utterances_scored``, ``utterances_excluded``, ``excluded_by_reason``, seconds) and marked in
the report, and a filtered set has its own ``eval_cuts_sha256`` (:func:`scored_sha256`), so it is
never ranked or paired with the whole set.

Example::

    kept, cover = scored_cuts(cuts, FilterConfig(max_duration=60), contract)
    cover["utterances_excluded"], cover["excluded_by_reason"]   # 3, {"too_long": 3}
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from lhotse.cut import Cut

from asrflow.data.filter import FilterConfig, filter_cuts
from asrflow.hashing import sha256_json
from asrflow.text import TextNormalization

log = logging.getLogger(__name__)


NO_BOUNDS = {
    "min_duration": 0.0,
    "max_duration": math.inf,
    "min_chars_per_second": 0.0,
    "max_chars_per_second": math.inf,
}
"""The bounds of an ``evaluation.filter`` that sets none: a bound it leaves out is no bound
(unlike the training filter's, whose defaults remove outliers)."""


def eval_filter(settings: Mapping[str, Any] | None) -> FilterConfig | None:
    """``evaluation.filter`` parsed; ``None`` (the default) when no utterance is to be excluded.

    >>> eval_filter(None) is None
    True
    >>> cfg = eval_filter({"max_duration": 60})
    >>> cfg.min_duration, cfg.max_duration, cfg.max_chars_per_second
    (0.0, 60, inf)
    """
    if settings is None:
        return None
    return FilterConfig.from_dict({**NO_BOUNDS, **settings})


def scored_cuts(
    cuts: Sequence[Cut], config: FilterConfig | None, contract: TextNormalization
) -> tuple[list[Cut], dict[str, Any]]:
    """The cuts to score (in input order) and their :func:`coverage` of the whole set, with
    ``excluded_ids`` (reason -> cut IDs) where ``config`` excludes any."""
    cuts = list(cuts)
    if config is None:
        return cuts, coverage(cuts, cuts, None, {})
    kept, report = filter_cuts(cuts, config, contract)
    kept = list(kept)
    excluded_ids = {r: ids for r, ids in report["removed_ids"].items() if ids}
    cover = coverage(cuts, kept, config, {r: len(ids) for r, ids in excluded_ids.items()})
    cover["excluded_ids"] = excluded_ids
    if cover["utterances_excluded"]:
        log.warning(
            "evaluation.filter excludes %d of %d utterance(s) (%.1f of %.1f s) from this eval "
            "set (%s): its figures are on a partial set",
            cover["utterances_excluded"],
            cover["utterances_total"],
            cover["seconds_excluded"],
            cover["seconds_total"],
            ", ".join(f"{n} {r}" for r, n in cover["excluded_by_reason"].items()),
        )
    return kept, cover


def coverage(
    whole: Sequence[Cut],
    kept: Sequence[Cut],
    config: FilterConfig | None,
    excluded_by_reason: Mapping[str, int],
) -> dict[str, Any]:
    """How much of the eval set ``whole`` was scored (the keys every evaluation summary has)::

    {"utterances_total", "utterances_scored", "utterances_excluded",
     "excluded_by_reason": {reason: n},  # the nonzero ones
     "seconds_total", "seconds_scored", "seconds_excluded",
     "complete": bool, "eval_filter": settings or None}
    """
    total = sum(c.duration for c in whole)
    scored = sum(c.duration for c in kept)
    return {
        "utterances_total": len(whole),
        "utterances_scored": len(kept),
        "utterances_excluded": len(whole) - len(kept),
        "excluded_by_reason": dict(sorted(excluded_by_reason.items())),
        "seconds_total": round(total, 3),
        "seconds_scored": round(scored, 3),
        "seconds_excluded": round(total - scored, 3),
        "complete": len(kept) == len(whole),
        "eval_filter": config.to_dict() if config is not None else None,
    }


def scored_sha256(cuts_sha256: str, config: FilterConfig | None) -> str:
    """The ``eval_cuts_sha256`` of an evaluation: the eval cuts file's digest for the whole set,
    and of that digest with the filter's settings for a filtered one (never equal to the
    whole set's, so the two are never ranked or paired together); bounds count as numbers
    (``60`` and ``60.0`` are one filter)."""
    if config is None:
        return cuts_sha256
    bounds = {k: v if isinstance(v, str) else float(v) for k, v in config.to_dict().items()}
    return sha256_json({"eval_cuts": cuts_sha256, "eval_filter": bounds})
