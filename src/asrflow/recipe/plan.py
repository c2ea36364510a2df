"""A run's plan: the values ``recipe: auto`` derives from its train split, each with its reason.

Rule ``plan_run`` writes it (``results/runs/<run>/plan/plan.json``) from the run's filtered
train cuts before anything trains; the batch audit, the smoke run and the train job read it and
merge its values over the base recipe (:data:`AUTO_BASE`), under every key the run's overrides
(and the smoke run's own settings) set: an explicit key always wins. The plan file is written
only when its content changes, so a data revision that leaves every derived value as it was
retrains nothing through it, and a rule change (a bump of
:data:`~asrflow.recipe.rules.RULES_VERSION`, which reruns rule plan_run; the version is not in
the file) retrains exactly the runs whose values (or reasons) it changes.

Example (``asrflow plan RUN`` prints this)::

    plan = make_plan("fsdd", stats, explicit={"trainer.seed"})
    for line in plan_lines(plan): print(line)
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.io import write_json
from asrflow.params import flatten
from asrflow.recipe.rules import RULES_VERSION, choices
from asrflow.recipe.stats import CorpusStats, train_stats
from asrflow.text import TextNormalization

log = logging.getLogger(__name__)

AUTO = "auto"
"""The recipe name (``runs.<run>.recipe: auto``) of the built-in recipe that follows the corpus."""
AUTO_BASE = Path(__file__).with_name("auto.yaml")
"""The base recipe of ``recipe: auto``: what is not derived (the conformer's block design, the
loss, the checkpoints kept, the diagnostics), and values the plan replaces."""


def is_auto(recipe: str) -> bool:
    return recipe == AUTO


def nest(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """``[("a.b", 1)]`` -> ``{"a": {"b": 1}}``."""
    out: dict[str, Any] = {}
    for key, value in items:
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = copy.deepcopy(value)
    return out


def overridden(key: str, explicit: Iterable[str]) -> str | None:
    """The explicit key that overrides choice ``key`` whole: the key itself or a section above
    it (``frontend_conf`` given whole overrides ``frontend_conf.fs``)."""
    for e in explicit:
        if e == key or key.startswith(f"{e}."):
            return e
    return None


def inside(key: str, explicit: Iterable[str]) -> list[str]:
    """The explicit keys inside choice ``key`` (a mapping such as ``specaug_conf``): the plan's
    mapping is kept with these keys taken from the overrides."""
    return [e for e in explicit if e.startswith(f"{key}.")]


def make_plan(
    run: str,
    stats: CorpusStats,
    *,
    explicit: Iterable[str] = (),
    recipe: str = AUTO,
    inherited: Iterable[str] = (),
    lineage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan of ``run``: the statistics, every rule's choice (with ``overridden_by`` when a
    key of ``explicit``, the run's overrides as dotted keys, sets it, and ``from_package`` when
    it lies under one of ``inherited``, the model keys a fine-tuning run takes from its starting
    package: :mod:`asrflow.recipe.inherit`), ``values``: the choices neither overrides, nested
    as a recipe, and for a run that starts from another model its ``lineage``
    (:func:`asrflow.recipe.rules.fine_tuning`)."""
    explicit, inherited = sorted(explicit), sorted(inherited)
    rows, kept = [], []
    for c in choices(stats, lineage):
        by = overridden(c.key, explicit)
        row = {"key": c.key, "value": c.value, "reason": c.reason, "overridden_by": by}
        if inside(c.key, explicit):
            row["overridden_inside"] = inside(c.key, explicit)
        package = by is None and overridden(c.key, inherited) is not None
        if package:
            row["from_package"] = True
        rows.append(row)
        if by is None and not package:
            kept.append((c.key, c.value))
    plan = {
        "run": run,
        "recipe": recipe,
        "stats": stats.to_dict(),
        "choices": rows,
        "values": nest(kept),
    }
    if lineage is not None:
        plan["lineage"] = dict(lineage)
    return plan


def apply_plan(
    data: Mapping[str, Any], plan: Mapping[str, Any], explicit: Iterable[str]
) -> dict[str, Any]:
    """Recipe ``data`` with the plan's values merged in, except under the ``explicit`` keys
    (dotted: the keys this job's overrides set, which ``data`` already holds)."""
    explicit = list(explicit)
    out = copy.deepcopy(dict(data))
    for c in plan["choices"]:
        if overridden(c["key"], explicit) is not None or c.get("from_package"):
            continue
        *parents, last = c["key"].split(".")
        node = out
        for p in parents:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        value = copy.deepcopy(c["value"])
        within = inside(c["key"], explicit)
        if within and isinstance(value, dict):
            # the plan's mapping, with the keys the overrides set inside it as they set them
            given = flatten(node.get(last) or {}, f"{c['key']}.")
            value = deep_update(
                value, nest((k[len(c["key"]) + 1 :], given[k]) for k in within if k in given)
            )
        node[last] = value
    return out


def deep_update(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` merged in (mappings recursively; ``base`` is modified)."""
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            deep_update(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def explicit_keys(overrides: Mapping[str, Any]) -> list[str]:
    """The dotted keys an overrides mapping sets (its leaves)."""
    return sorted(flatten(overrides))


def plan_lines(plan: Mapping[str, Any]) -> list[str]:
    """The plan as lines of text: the statistics, then each value with its reason."""
    s = plan["stats"]
    rates = ", ".join(
        f"{int(r) / 1000:g} kHz {sec / 3600:.2f} h" for r, sec in s["rate_seconds"].items()
    )
    if is_auto(plan["recipe"]):
        head = f"run {plan['run']}: recipe auto (rules version {RULES_VERSION})"
    else:
        head = (
            f"run {plan['run']}: recipe {plan['recipe']}, not auto: it trains as its file says; "
            f"recipe auto would take (rules version {RULES_VERSION}):"
        )
    lines = [
        head,
        f"  train split: {s['hours']:.2f} h, {s['utterances']} utterances, "
        f"{s['speakers'] if s['speakers'] is not None else 'unknown'} speakers, median "
        f"{s['median_duration']:.1f} s, {rates}; text: {s['words']} distinct words, "
        f"{s['characters']} characters" + ("; synthetic speech" if s["synthetic"] else ""),
    ]
    if plan.get("lineage") is not None:
        g = plan["lineage"]
        lr = g.get("parent_lr")
        lines.append(
            f"  fine-tunes {g.get('parent') or 'its init model'} (peak LR "
            f"{'unknown' if lr is None else f'{lr:g}'}; "
            f"{'itself fine-tuned' if g.get('generation', 0) else 'trained from scratch'})"
        )
    width = max((len(c["key"]) for c in plan["choices"]), default=0)
    for c in plan["choices"]:
        value = _short(c["value"])
        if c.get("overridden_inside"):
            value += (
                f" (with {', '.join(c['overridden_inside'])} from runs.{plan['run']}.overrides)"
            )
        if c["overridden_by"]:
            lines.append(
                f"  {c['key']:<{width}}  (overridden by runs.{plan['run']}.overrides."
                f"{c['overridden_by']}; the rule says {value}: {c['reason']})"
            )
        elif c.get("from_package"):
            lines.append(
                f"  {c['key']:<{width}}  (the starting package's, init.model; the rule says "
                f"{value}: {c['reason']})"
            )
        else:
            lines.append(f"  {c['key']:<{width}}  {value}: {c['reason']}")
    return lines


def _short(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return "null" if value is None else str(value)


def write_plan(
    run: str,
    train_cuts: list[str],
    out: str,
    *,
    normalization: Mapping[str, Any],
    synthetic: bool,
    explicit: Iterable[str],
    recipe: str = AUTO,
    inherited: Iterable[str] = (),
    lineage: Mapping[str, Any] | None = None,
    parent_summary: str | Path | None = None,
) -> dict[str, Any]:
    """Rule plan_run: the plan of ``run`` from its filtered train cuts, written to ``out``
    (unchanged content keeps the file as it was) and logged line by line. A fine-tuning run's
    ``lineage`` takes ``parent_lr`` from its parent run's train summary (``parent_summary``:
    the peak LR it trained with)."""
    stats = train_stats(train_cuts, TextNormalization.from_dict(normalization), synthetic=synthetic)
    if lineage is not None:
        lineage = {**lineage, "parent_lr": parent_peak_lr(parent_summary)}
    plan = make_plan(
        run, stats, explicit=explicit, recipe=recipe, inherited=inherited, lineage=lineage
    )
    write_json(out, plan)
    for line in plan_lines(plan):
        log.info("%s", line)
    return plan


def parent_peak_lr(summary: str | Path | None) -> float | None:
    """The peak LR a parent run trained with (``recipe_settings.optim.lr`` of its train
    summary), or None without a summary."""
    if summary is None:
        return None
    with open(summary, encoding="utf-8") as f:
        settings = json.load(f).get("recipe_settings") or {}
    lr = (settings.get("optim") or {}).get("lr")
    return float(lr) if lr is not None else None


def read_plan(path: str | Path) -> dict[str, Any]:
    """A plan file, or an error naming it and the rule that makes it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise AsrflowError(f"{path}: cannot read the run's plan ({e}); rerun plan_run") from None
