"""Manifest validation: the gate every corpus passes before anything trains on it.

A wrong manifest does not crash, it trains a worse model; so every check
(:mod:`asrflow.data.checks`, which lists them with their codes) runs over all splits of a corpus
together, and the report names the manifest line, the item and what to do for each finding.
Errors stop the workflow (:class:`~asrflow.errors.ValidationFailed`); warnings are listed in the
report. Lhotse's own per-cut checks (:func:`lhotse.qa.validate`) run first.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from dataclasses import field as dc_field
from typing import Any

import numpy as np
import soundfile
from lhotse.cut import Cut

from asrflow.data.audio import AudioInfo, read_audio_infos
from asrflow.data.audio_checks import NonFiniteAudio, resampling_note
from asrflow.data.checks import CHECKS, dev_finding, group_values
from asrflow.data.cuts import field
from asrflow.data.dev_groups import CODE as DEV_SEEN_GROUPS
from asrflow.data.issues import Issue, ValidationConfig, audio_path
from asrflow.errors import ValidationFailed
from asrflow.text import DEFAULT as DEFAULT_NORMALIZATION
from asrflow.text import TextNormalization

log = logging.getLogger(__name__)

Splits = Mapping[str, Sequence[Cut]]


@dataclass
class Report:
    """The validation report artifact (written as JSON and as readable text)."""

    corpus: str
    splits: dict[str, dict[str, Any]]
    errors: list[Issue] = dc_field(default_factory=list)
    warnings: list[Issue] = dc_field(default_factory=list)
    checks: list[str] = dc_field(default_factory=list)
    config: dict[str, Any] = dc_field(default_factory=dict)
    sampling: dict[str, Any] = dc_field(default_factory=dict)
    groups: dict[str, dict[str, list[str]]] = dc_field(default_factory=dict)
    dev_groups: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus,
            "ok": self.ok,
            "num_errors": len(self.errors),
            "num_warnings": len(self.warnings),
            "errors_by_code": dict(Counter(i.code for i in self.errors)),
            "warnings_by_code": dict(Counter(i.code for i in self.warnings)),
            "splits": self.splits,
            "sampling_rates": self.sampling,
            "checks": self.checks,
            "config": self.config,
            "dev_groups": self.dev_groups,
            "groups": self.groups,
            "errors": [asdict(i) for i in self.errors],
            "warnings": [asdict(i) for i in self.warnings],
        }

    def to_text(self, limit: int = 50) -> str:
        lines = [
            f"Validation of corpus {self.corpus!r}: "
            f"{'PASSED' if self.ok else 'FAILED'} with {len(self.errors)} error(s), "
            f"{len(self.warnings)} warning(s)",
            "",
        ]
        for name, stats in self.splits.items():
            rates = ", ".join(f"{sr} Hz: {n}" for sr, n in stats["sampling_rates"].items())
            lines.append(
                f"  {name:>8}: {stats['utterances']} utterances, "
                f"{stats['hours']:.3f} h, {stats['speakers']} speakers ({rates})"
            )
        if self.sampling:
            found = ", ".join(f"{sr} Hz: {n}" for sr, n in self.sampling["found"].items())
            declared = self.sampling["declared"]
            lines += [
                "",
                f"Sampling rates: {found or 'none read'}; declared: "
                f"{f'{declared} Hz' if declared else 'none'}.",
                f"Audio: {self.sampling['note']}.",
            ]
        # a corpus-wide finding first, so that no run of per-line warnings hides it
        warnings = sorted(self.warnings, key=lambda i: i.code != DEV_SEEN_GROUPS)
        for title, issues in (("Errors", self.errors), ("Warnings", warnings)):
            if issues:
                lines += ["", f"{title}:"]
                lines += [f"  {i.format()}" for i in issues[:limit]]
                if len(issues) > limit:
                    lines.append(f"  ... and {len(issues) - limit} more (see the JSON report)")
        lines += ["", "Checks run: " + ", ".join(self.checks), ""]
        return "\n".join(lines)


DEFAULT_CONFIG = ValidationConfig()
OPERATIONAL = frozenset({"threads"})
"""Settings that change how validation runs, not what it finds: kept out of the report."""


def _read_infos(splits: Splits, config: ValidationConfig) -> dict[str, AudioInfo | Exception]:
    paths = {audio_path(c) for cuts in splits.values() for c in cuts}
    infos = read_audio_infos(paths, threads=config.threads)
    if config.full_decode:

        def decode(path: str) -> AudioInfo | Exception:
            info = infos[path]
            if isinstance(info, Exception):
                return info
            try:
                samples = soundfile.read(path, dtype="float32", always_2d=True)[0]
            except Exception as exc:
                return exc
            if len(samples) != info.num_samples:
                return RuntimeError(
                    f"decoded {len(samples)} samples, header says {info.num_samples}"
                )
            bad = ~np.isfinite(samples).all(axis=1)
            if bad.any():
                first = int(np.flatnonzero(bad)[0]) / info.sampling_rate
                return NonFiniteAudio(
                    f"holds non-finite samples (NaN or inf) from {first:.3f} s on "
                    f"({int(bad.sum())} frames)"
                )
            return info

        with ThreadPoolExecutor(max_workers=max(1, config.threads)) as pool:
            infos = dict(zip(infos, pool.map(decode, infos), strict=True))
    return infos


def _split_stats(cuts: Sequence[Cut], infos: Mapping[str, AudioInfo | Exception]) -> dict:
    rates = Counter(
        info.sampling_rate for c in cuts if not isinstance(info := infos[audio_path(c)], Exception)
    )
    return {
        "utterances": len(cuts),
        "hours": round(sum(c.duration for c in cuts) / 3600, 6),
        "speakers": len({field(c, "speaker") for c in cuts} - {None}),
        "sampling_rates": {str(k): v for k, v in sorted(rates.items())},
    }


def sampling_summary(
    splits: Splits,
    infos: Mapping[str, AudioInfo | Exception],
    sampling_rate: int | None,
    model_rates: Mapping[str, int] | None,
) -> dict[str, Any]:
    """The report's ``sampling_rates``: declared, found (utterances per rate), models' rates."""
    found = Counter(
        info.sampling_rate
        for cuts in splits.values()
        for c in cuts
        if not isinstance(info := infos[audio_path(c)], Exception)
    )
    return {
        "declared": sampling_rate,
        "found": {str(k): v for k, v in sorted(found.items())},
        "models": dict(sorted((model_rates or {}).items())),
        "note": resampling_note(model_rates),
    }


def validate_splits(
    corpus: str,
    splits: Splits,
    config: ValidationConfig = DEFAULT_CONFIG,
    normalization: TextNormalization = DEFAULT_NORMALIZATION,
    *,
    sampling_rate: int | None = None,
    model_rates: Mapping[str, int] | None = None,
    manifests: Mapping[str, str] | None = None,
) -> Report:
    """Run every check over all splits of a corpus and return the report (never raises).

    ``sampling_rate``: the corpus's declared rate (every file must have it), or ``None``;
    ``model_rates``: ``{run: rate}`` the frontends of the runs using the corpus expect (for the
    report: audio is resampled to it when loaded); ``manifests``: split -> the manifest (or
    Kaldi dir) it was imported from, named where no utterance's line can be (an empty split).

    The report keeps each split's values of ``group_fields`` (``groups``: what selection compares
    a run's train, dev and test sets by, :func:`asrflow.data.dev_groups.run_finding`) and, when
    dev measures seen speakers only, the finding (``dev_groups``, also a warning).
    """
    infos = _read_infos(splits, config)
    groups = group_values(splits, config.group_fields)
    report = Report(
        corpus=corpus,
        splits={name: _split_stats(cuts, infos) for name, cuts in splits.items()},
        checks=[check.__name__ for check in CHECKS],
        # the thread count is left out: the report is the same whatever the core count
        config={
            **{k: v for k, v in asdict(config).items() if k not in OPERATIONAL},
            "normalization": normalization.to_dict(),
        },
        sampling=sampling_summary(splits, infos, sampling_rate, model_rates),
        groups=groups,
    )
    finding = dev_finding(groups, config, corpus)
    report.dev_groups = finding.to_dict() if finding is not None else None
    for check in CHECKS:
        found = check(
            splits=splits,
            infos=infos,
            config=config,
            normalization=normalization,
            corpus=corpus,
            sampling_rate=sampling_rate,
            model_rates=model_rates,
            manifests=manifests or {},
            groups=groups,
        )
        for issue in found:
            (report.errors if issue.severity == "error" else report.warnings).append(issue)
    log.info(
        "validated %s: %d errors, %d warnings", corpus, len(report.errors), len(report.warnings)
    )
    return report


def raise_on_errors(report: Report, limit: int = 20) -> None:
    """Stop the workflow with a message naming each bad line, when the report has errors."""
    if report.ok:
        return
    shown = "\n".join(f"  {i.format()}" for i in report.errors[:limit])
    more = f"\n  ... and {len(report.errors) - limit} more" if len(report.errors) > limit else ""
    raise ValidationFailed(
        f"corpus {report.corpus!r} failed validation with {len(report.errors)} error(s):\n"
        f"{shown}{more}\nFix the manifest lines named above (or the config) and rerun."
    )
