"""What differs between two training runs, named: the report's ``changed_vs_baseline`` column.

:func:`what_changed` compares two runs' train summaries (``results/runs/<run>/train/summary.json``)
and, where given, the provenance records of their train steps (``summary.json.prov.json``) in
the categories of :data:`CATEGORIES`:

- ``data``: the content hash of each train split (named ``<corpus>.<split>`` from its path, so
  an added or dropped corpus shows as ``+other.train``/``-other.train``), the dev split, the text
  normalization and the corpus weights (``runs.<run>.weights``, from the record's params);
- ``tokenizer``: the SentencePiece model and token list (named by the tokenizer directory when
  the records give its path);
- ``recipe``: every setting of the recipe identity (``recipe_settings``: the recipe with the
  run's overrides and hardware merged in, operational keys such as loader workers left out, as
  :meth:`asrflow.recipe.sections.Recipe.identity` has them), as dotted keys with old -> new values;
- ``start_weights``: the hash of the weights a fine-tuning run started from (none: from
  scratch), which of their keys it took (``init.include``/``exclude``) and which of them it
  trained (``init.freeze``, ``init.adapter``): what tells a full fine-tune from its frozen or
  LoRA sibling;
- ``effective_batch``: audio per optimizer step; ``update_budget``: optimizer steps, warm-up,
  audio seen and peak LR, compared on the keys both summaries have;
- ``code``: asrflow modules both train steps ran (``code.modules`` of the records) whose source
  differs, and the train script. A module only one step imported is a different code path, not
  different code, and is not counted; nor is the git commit (it moves with unrelated edits);
- ``packages``: Python and the key packages' versions (the records' ``packages``).

A category is compared only where both runs record it (a run that failed before writing a
recipe, or a summary without a provenance record beside it, compares nothing there).

**Confounded**: more than one *cause* changed, so a WER difference cannot be put down to one of
them. The effective batch and the update budget are computed from recipe keys (batch duration,
devices, accumulation, ``max_steps``, LR scaling), so when the recipe changed too they are its
consequences, not further causes: they are listed (``effective_batch (via recipe): 20 -> 40 s``)
but not counted. Without a recipe change (a summary written by other code) they count. All the
changed keys of a recipe are one cause: keys often move together (a model size is several keys;
a larger batch with its learning rate), and the text lists each, so the reader can judge.

Example::

    changes = what_changed(baseline_summary, summary, baseline_record, record)
    changes.text()        # "tokenizer: demo_unigram -> demo_bpe; recipe: optim.lr 0.002 -> 0.0015"
    changes.confounded    # True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.params import UNSET, changed_values

CATEGORIES = (
    "data",
    "tokenizer",
    "recipe",
    "start_weights",
    "effective_batch",
    "update_budget",
    "code",
    "packages",
)
"""What a run can differ in, in the order :meth:`Changes.text` lists them."""

DERIVED = frozenset({"effective_batch", "update_budget"})
"""Categories computed from the recipe: consequences of a recipe change, not causes beside it."""

HASH_CHARS = 8
"""Hex digits of a hash in the change text."""

MAX_DETAILS = 6
"""Details listed per category in the text; more are counted (``+3 more``)."""

CHANGE_COLUMNS = ("baseline_run", "changed_vs_baseline", "confounded")
"""The comparison table's columns from :func:`change_columns`."""

NO_CHANGE = "none"
"""The change text of a run that differs from the baseline in nothing recorded."""

Record = Mapping[str, Any]


@dataclass(frozen=True)
class Change:
    """One category in which two runs differ, with what differs in it (``optim.lr 0.002 ->
    0.0015``); ``derived``: a consequence of another change (see the module docstring)."""

    category: str
    details: tuple[str, ...]
    derived: bool = False

    def text(self) -> str:
        name = f"{self.category} (via recipe)" if self.derived else self.category
        shown = list(self.details[:MAX_DETAILS])
        if len(self.details) > MAX_DETAILS:
            shown.append(f"+{len(self.details) - MAX_DETAILS} more")
        return f"{name}: {', '.join(shown)}" if shown else name


@dataclass(frozen=True)
class Changes:
    """Every category in which a run differs from another (in :data:`CATEGORIES` order)."""

    changes: tuple[Change, ...] = ()

    @property
    def causes(self) -> tuple[str, ...]:
        """The categories that count as causes (derived ones left out)."""
        return tuple(c.category for c in self.changes if not c.derived)

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(c.category for c in self.changes)

    @property
    def confounded(self) -> bool:
        """More than one cause changed."""
        return len(self.causes) > 1

    def get(self, category: str) -> Change | None:
        return next((c for c in self.changes if c.category == category), None)

    def text(self) -> str:
        """``"tokenizer: a -> b; recipe: optim.lr 0.002 -> 0.0015"``; :data:`NO_CHANGE` if none."""
        return "; ".join(c.text() for c in self.changes) or NO_CHANGE


def what_changed(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    a_record: Record | None = None,
    b_record: Record | None = None,
) -> Changes:
    """How run ``b`` differs from run ``a`` (their train summaries and, optionally, the
    provenance records of their train steps); see the module docstring."""
    found: dict[str, list[str]] = {}
    for category, compare in _COMPARISONS.items():
        details = compare(a, b, a_record or {}, b_record or {})
        if details:
            found[category] = details
    recipe_changed = "recipe" in found
    return Changes(
        tuple(
            Change(c, tuple(found[c]), derived=recipe_changed and c in DERIVED)
            for c in CATEGORIES
            if c in found
        )
    )


def baseline_of(runs: Sequence[str], baseline_run: str | None) -> str | None:
    """The run the others are compared with: ``baseline_run`` (``report.baseline_run``), else
    the first of ``runs`` (config order); ``None`` without runs."""
    if baseline_run is None:
        return runs[0] if runs else None
    if baseline_run not in runs:
        raise AsrflowError(
            f"report.baseline_run: no train summary of run {baseline_run!r} "
            f"(have: {', '.join(runs) or 'none'})"
        )
    return baseline_run


def change_columns(
    train_summaries: Mapping[str, Mapping[str, Any]],
    records: Mapping[str, Record],
    baseline: str | None,
) -> dict[str, dict[str, Any]]:
    """Per run: ``baseline_run``, ``changed_vs_baseline`` (:meth:`Changes.text`; empty for the
    baseline itself) and ``confounded`` (``False`` for the baseline)."""
    if baseline is None:
        return {}
    base, base_record = train_summaries[baseline], records.get(baseline)
    out = {}
    for run, summary in train_summaries.items():
        if run == baseline:
            out[run] = {"baseline_run": baseline, "changed_vs_baseline": None, "confounded": False}
            continue
        changes = what_changed(base, summary, base_record, records.get(run))
        out[run] = {
            "baseline_run": baseline,
            "changed_vs_baseline": changes.text(),
            "confounded": changes.confounded,
        }
    return out


# --- one comparison per category ---------------------------------------------------------------


def _short(value: Any) -> str:
    if value is None:
        return "none"
    return str(value)[:HASH_CHARS]


def _value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if value == UNSET else repr(value)


def _both(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> bool:
    return key in a and key in b


def _hashes(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    return summary.get("hashes") or {}


def split_label(path: str) -> str:
    """``results/data/demo/filtered/train.jsonl.gz`` -> ``demo.train`` (an eval set's form);
    any other path as it is."""
    p = PurePosixPath(str(path).replace("\\", "/"))
    if p.parent.name == "filtered" and p.name.endswith(".jsonl.gz"):
        return f"{p.parent.parent.name}.{p.name.removesuffix('.jsonl.gz')}"
    return str(path)


def _input_path(record: Record, name: str) -> str | None:
    """The one path of input ``name`` in a provenance record."""
    paths = list((record.get("inputs") or {}).get(name) or {})
    return paths[0] if len(paths) == 1 else None


def _data(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    ha, hb = _hashes(a), _hashes(b)
    out = []
    if _both(ha, hb, "train_cuts"):
        old = {split_label(k): v for k, v in (ha["train_cuts"] or {}).items()}
        new = {split_label(k): v for k, v in (hb["train_cuts"] or {}).items()}
        for label in sorted(set(old) | set(new)):
            if label not in new:
                out.append(f"-{label}")
            elif label not in old:
                out.append(f"+{label}")
            elif old[label] != new[label]:
                out.append(f"{label} {_short(old[label])} -> {_short(new[label])}")
    if _both(ha, hb, "dev_cuts") and ha["dev_cuts"] != hb["dev_cuts"]:
        old_dev, new_dev = (_input_path(r, "dev") for r in (ra, rb))
        if old_dev and new_dev and old_dev != new_dev:
            out.append(f"dev {split_label(old_dev)} -> {split_label(new_dev)}")
        else:
            out.append(f"dev {_short(ha['dev_cuts'])} -> {_short(hb['dev_cuts'])}")
    if _both(ha, hb, "normalization") and ha["normalization"] != hb["normalization"]:
        out.append("text normalization")
    pa, pb = ra.get("params") or {}, rb.get("params") or {}
    if _both(pa, pb, "weights") and pa["weights"] != pb["weights"]:
        out.append(f"corpus weights {pa['weights']} -> {pb['weights']}")
    return out


def _tokenizer(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    ha, hb = _hashes(a), _hashes(b)
    keys = [k for k in ("bpe_model", "tokens") if _both(ha, hb, k)]
    if not keys or all(ha[k] == hb[k] for k in keys):
        return []
    old, new = (_input_path(r, "bpe_model") for r in (ra, rb))
    if old and new and PurePosixPath(old).parent != PurePosixPath(new).parent:
        return [f"{PurePosixPath(old).parent.name} -> {PurePosixPath(new).parent.name}"]
    key = keys[0]
    return [f"{_short(ha[key])} -> {_short(hb[key])}"]


def _recipe(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    old, new = a.get("recipe_settings"), b.get("recipe_settings")
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [f"{k} {_value(x)} -> {_value(y)}" for k, x, y in changed_values(old, new)]
    ha, hb = _hashes(a), _hashes(b)
    if ha.get("recipe") and hb.get("recipe") and ha["recipe"] != hb["recipe"]:
        return [f"{_short(ha['recipe'])} -> {_short(hb['recipe'])}"]
    return []


def _start_weights(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    ha, hb = _hashes(a), _hashes(b)
    out = []
    if _both(ha, hb, "start_weights") and ha["start_weights"] != hb["start_weights"]:
        out.append(f"{_short(ha['start_weights'])} -> {_short(hb['start_weights'])}")
    ia, ib = a.get("init") or {}, b.get("init") or {}
    for key in ("include", "exclude", "freeze"):
        if _both(ia, ib, key) and ia[key] != ib[key]:
            out.append(f"{key} {ia[key]} -> {ib[key]}")
    if _both(ia, ib, "adapter") and ia["adapter"] != ib["adapter"]:
        out.append(f"adapter {_adapter(ia['adapter'])} -> {_adapter(ib['adapter'])}")
    return out


def _adapter(adapter: Mapping[str, Any] | None) -> str:
    """``lora r2 a4 on linear_q, linear_v``; ``none`` without one."""
    if not adapter:
        return "none"
    targets = ", ".join(adapter.get("targets") or ())
    text = f"{adapter.get('type', 'lora')} r{adapter.get('rank')} a{adapter.get('alpha')}"
    return f"{text} on {targets}" if targets else text


def _effective_batch(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    key = "effective_batch_seconds"
    if a.get(key) is None or b.get(key) is None or a[key] == b[key]:
        return []
    return [f"{_value(a[key])} -> {_value(b[key])} s"]


def _update_budget(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    old, new = a.get("update_budget") or {}, b.get("update_budget") or {}
    shared = (set(old) & set(new)) - {"effective_batch_seconds"}  # its own category
    return [f"{k} {_value(old[k])} -> {_value(new[k])}" for k in sorted(shared) if old[k] != new[k]]


def _code(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    ca, cb = ra.get("code") or {}, rb.get("code") or {}
    ma, mb = ca.get("modules") or {}, cb.get("modules") or {}
    out = [name for name in sorted(set(ma) & set(mb)) if ma[name] != mb[name]]
    sa, sb = ca.get("script") or {}, cb.get("script") or {}
    if sa.get("sha256") and sb.get("sha256") and sa["sha256"] != sb["sha256"]:
        out.append(str(sb.get("path") or "script"))
    return out


def _packages(a: Mapping, b: Mapping, ra: Record, rb: Record) -> list[str]:
    pa, pb = ra.get("packages") or {}, rb.get("packages") or {}
    return [
        f"{name} {pa[name] or 'absent'} -> {pb[name] or 'absent'}"
        for name in sorted(set(pa) & set(pb))
        if pa[name] != pb[name]
    ]


_COMPARISONS: dict[str, Callable[[Mapping, Mapping, Record, Record], list[str]]] = {
    "data": _data,
    "tokenizer": _tokenizer,
    "recipe": _recipe,
    "start_weights": _start_weights,
    "effective_batch": _effective_batch,
    "update_budget": _update_budget,
    "code": _code,
    "packages": _packages,
}
