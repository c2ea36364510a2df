"""Filtering cuts by duration and speaking rate, with a report of everything removed.

Every cut is kept or removed for exactly one reason, the first that fails, checked in this order:

1. ``too_short``: ``duration < min_duration``;
2. ``too_long``: ``duration > max_duration``;
3. ``empty_after_normalization``: the normalized transcript is ``""``;
4. ``too_few_chars_per_second``: ``rate < min_chars_per_second``;
5. ``too_many_chars_per_second``: ``rate > max_chars_per_second``.

``rate`` is the length of the *normalized* transcript (spaces included) divided by the cut's
duration. Too many characters per second means the transcript is longer than the audio can hold
(a misaligned or merged segment); too few means the audio is mostly silence or the transcript
is truncated. Bounds are inclusive: a cut exactly at a bound is kept.

Nothing is dropped silently: :func:`filter_cuts` returns a report with counts by reason and by
slice, every removed cut ID, and a few examples (with their manifest line) per reason, and logs a
summary; :func:`write_filter_report` writes it as JSON and as readable text.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from lhotse import CutSet
from lhotse.cut import Cut

from asrflow.data.cuts import field, origin, text
from asrflow.errors import AsrflowError
from asrflow.io import write_json, write_text
from asrflow.settings import known_settings, schema_defaults
from asrflow.text import TextNormalization, normalize
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

REASONS = (
    "too_short",
    "too_long",
    "empty_after_normalization",
    "too_few_chars_per_second",
    "too_many_chars_per_second",
)
"""Removal reasons, in the order they are checked."""

EXAMPLES_PER_REASON = 10
"""Removed cuts described in detail (ID, manifest line, duration, rate, text) per reason."""


_DEFAULT = schema_defaults("corpora.*.filter")


@dataclass(frozen=True)
class FilterConfig:
    """Bounds of :func:`filter_cuts` (``filter`` in the config); seconds and chars per second.

    Defaults (the schema's, :func:`~asrflow.settings.schema_defaults`) remove only clear outliers:

    - ``min_duration`` 0.3 s: shorter cuts hold at most a syllable and are often segmentation
      debris;
    - ``max_duration`` 30 s: the usual ceiling for ASR training batches (memory grows with
      length) and the length of most corpora's longest clean segments;
    - ``min_chars_per_second`` 1.0: fewer than one character per second (e.g. ``"sí"`` over
      3 s) is mostly silence or a truncated transcript;
    - ``max_chars_per_second`` 30.0: fast conversational speech is about 15-20 characters per
      second (spaces counted); twice the usual rate means text the audio cannot hold.

    Set a ``min_*`` to 0 or a ``max_*`` to ``inf`` (``.inf`` in YAML) to turn that check off.
    """

    min_duration: float = _DEFAULT["min_duration"]
    max_duration: float = _DEFAULT["max_duration"]
    min_chars_per_second: float = _DEFAULT["min_chars_per_second"]
    max_chars_per_second: float = _DEFAULT["max_chars_per_second"]

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise AsrflowError(f"filter.{f.name} must be a number, got {value!r}")
            if value < 0:
                raise AsrflowError(f"filter.{f.name} must not be negative, got {value}")
        for low, high in (
            ("min_duration", "max_duration"),
            ("min_chars_per_second", "max_chars_per_second"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise AsrflowError(
                    f"filter.{low} ({getattr(self, low)}) is above filter.{high} "
                    f"({getattr(self, high)}); every cut would be removed"
                )

    def to_dict(self) -> dict[str, float | str]:
        """JSON-ready settings; an infinite bound is written as ``"inf"`` (JSON has no inf)."""
        return {k: "inf" if v == math.inf else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> FilterConfig:
        """Settings from a config mapping; missing keys take defaults, unknown keys are errors."""
        d = known_settings(cls, d, "filter")
        for k, v in d.items():
            if isinstance(v, str):  # "inf" as written by to_dict
                try:
                    d[k] = float(v)
                except ValueError:
                    raise AsrflowError(f"filter.{k} must be a number, got {v!r}") from None
        return cls(**d)


def removal_reason(
    duration: float, normalized_text: str, config: FilterConfig
) -> tuple[str | None, float]:
    """The first failing reason (``None`` to keep) and the chars-per-second rate.

    >>> removal_reason(2.0, "hola", FilterConfig())
    (None, 2.0)
    """
    rate = len(normalized_text) / duration if duration > 0 else math.inf
    if duration < config.min_duration:
        return "too_short", rate
    if duration > config.max_duration:
        return "too_long", rate
    if not normalized_text:
        return "empty_after_normalization", rate
    if rate < config.min_chars_per_second:
        return "too_few_chars_per_second", rate
    if rate > config.max_chars_per_second:
        return "too_many_chars_per_second", rate
    return None, rate


def filter_cuts(
    cuts: CutSet | Iterable[Cut],
    config: FilterConfig,
    normalization: TextNormalization,
    slice_fields: Sequence[str] = (),
) -> tuple[CutSet, dict[str, Any]]:
    """Keep the cuts that pass every check; report the others.

    ``slice_fields`` are manifest fields (``speaker``, ``code_switch``, ...) to count removals
    by; values are counted as strings (``"True"``, ``"None"``). Returns the kept cuts, in input
    order, and the report::

        {"input": n, "kept": n, "removed": n,
         "removed_by_reason": {reason: n},            # every reason, zeros included
         "removed_by_slice": {field: {value: n}},     # removed cuts per slice value
         "input_by_slice": {field: {value: n}},       # all cuts per slice value (for rates)
         "kept_seconds": s, "removed_seconds": s,
         "removed_ids": {reason: [cut IDs, input order]},
         "examples": {reason: [{"id", "origin", "duration", "chars_per_second", "text"}, ...]},
         "config": {...}, "normalization": {...}, "normalization_sha256": "..."}
    """
    kept = []
    removed_ids: dict[str, list[str]] = {r: [] for r in REASONS}
    examples: dict[str, list[dict[str, Any]]] = {r: [] for r in REASONS}
    by_slice: dict[str, Counter[str]] = {f: Counter() for f in slice_fields}
    input_by_slice: dict[str, Counter[str]] = {f: Counter() for f in slice_fields}
    kept_seconds = removed_seconds = 0.0
    for cut in cuts:
        normalized = normalize(text(cut), normalization)
        reason, rate = removal_reason(cut.duration, normalized, config)
        values = {f: str(field(cut, f)) for f in slice_fields}
        for f, v in values.items():
            input_by_slice[f][v] += 1
        if reason is None:
            kept.append(cut)
            kept_seconds += cut.duration
            continue
        removed_seconds += cut.duration
        removed_ids[reason].append(cut.id)
        for f, v in values.items():
            by_slice[f][v] += 1
        if len(examples[reason]) < EXAMPLES_PER_REASON:
            examples[reason].append(
                {
                    "id": cut.id,
                    "origin": origin(cut),
                    "duration": round(cut.duration, 3),
                    "chars_per_second": round(rate, 2) if math.isfinite(rate) else "inf",
                    "text": text(cut),
                }
            )
    n_removed = sum(len(ids) for ids in removed_ids.values())
    report: dict[str, Any] = {
        "input": len(kept) + n_removed,
        "kept": len(kept),
        "removed": n_removed,
        "removed_by_reason": {r: len(removed_ids[r]) for r in REASONS},
        "removed_by_slice": {f: dict(sorted(c.items())) for f, c in by_slice.items()},
        "input_by_slice": {f: dict(sorted(c.items())) for f, c in input_by_slice.items()},
        "kept_seconds": round(kept_seconds, 3),
        "removed_seconds": round(removed_seconds, 3),
        "removed_ids": removed_ids,
        "examples": examples,
        "config": config.to_dict(),
        "normalization": normalization.to_dict(),
        "normalization_sha256": normalization.sha256(),
    }
    _log_summary(report)
    return CutSet.from_cuts(kept), report


def _log_summary(report: Mapping[str, Any]) -> None:
    log.info(
        "filter: kept %d of %d cut(s) (%.1f s), removed %d (%.1f s)",
        report["kept"],
        report["input"],
        report["kept_seconds"],
        report["removed"],
        report["removed_seconds"],
    )
    for reason, n in report["removed_by_reason"].items():
        if n:
            log.info("filter: removed %d cut(s) as %s", n, reason)
    if report["input"] and not report["kept"]:
        log.warning("filter: every cut was removed; check the filter bounds against the data")


SHOWN_CHARS = 120
"""The text report shows this much of a long transcript (the JSON report keeps it whole)."""


def shortened(transcript: str, limit: int = SHOWN_CHARS) -> str:
    """``repr(transcript)``, or its first ``limit`` characters, an ellipsis and its length."""
    if len(transcript) <= limit:
        return repr(transcript)
    return f"{transcript[:limit]!r}... ({len(transcript)} characters)"


def format_filter_report(report: Mapping[str, Any]) -> str:
    """The report as readable text (what :func:`write_filter_report` puts in the ``.txt``)."""
    cfg = report["config"]
    lines = [
        "Filter report",
        "=============",
        f"input:   {report['input']} cut(s)",
        f"kept:    {report['kept']} cut(s), {report['kept_seconds']:.1f} s",
        f"removed: {report['removed']} cut(s), {report['removed_seconds']:.1f} s",
        "",
        "bounds: duration {min_duration}..{max_duration} s, "
        "chars/s {min_chars_per_second}..{max_chars_per_second}".format(**cfg),
        f"normalization: {report.get('normalization_sha256', '?')}",
        "",
        "removed by reason (checked in this order):",
    ]
    # Reasons in checking order (a report read back from JSON has its keys sorted).
    by_reason = report["removed_by_reason"]
    reasons = [r for r in REASONS if r in by_reason] + sorted(set(by_reason) - set(REASONS))
    for reason in reasons:
        lines.append(f"  {reason:<28} {by_reason[reason]}")
    for f, counts in report["removed_by_slice"].items():
        totals = report.get("input_by_slice", {}).get(f, {})
        lines += ["", f"removed by {f}:"]
        for value in sorted(set(counts) | set(totals)):
            total = totals.get(value)
            share = f" of {total}" if total is not None else ""
            lines.append(f"  {value:<28} {counts.get(value, 0)}{share}")
    examples = report.get("examples", {})
    for reason in reasons:
        rows = examples.get(reason)
        if not rows:
            continue
        n = report["removed_by_reason"][reason]
        lines += ["", f"{reason}: {len(rows)} of {n} shown (all IDs in the JSON report)"]
        for row in rows:
            lines.append(
                f"  {row['id']}  ({row['origin']})  {row['duration']} s, "
                f"{row['chars_per_second']} chars/s: {shortened(row['text'])}"
            )
    return "\n".join(lines) + "\n"


def write_filter_report(report: Mapping[str, Any], json_path: Pathlike, txt_path: Pathlike) -> None:
    """Write the report as stable JSON and as text (both atomic)."""
    write_json(json_path, report)
    write_text(txt_path, format_filter_report(report))
