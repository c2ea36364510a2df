"""Whether a dev set can tell how a model does on speakers it never heard.

A dev split of held-out takes of the *training* speakers (allowed with
``validation.allow_group_overlap: [speaker]``) measures seen speakers only. On real speech a model
can reach 2 % WER on such a dev set and 42 % on a test set of new speakers, and selection on dev
cannot tell. :func:`find_dev_seen_groups` finds that case from the group values (speaker,
session) of each split: dev shares *every* one of its groups with train while some test set has
groups train lacks. When every split shares every speaker (speaker-dependent by design) there is
no test set of new speakers and nothing is found.

Pure functions over sets of values (no Lhotse): validation (:mod:`asrflow.data.checks`) runs them
on a corpus's splits, selection (:mod:`asrflow.select.choose`) on a run's train, dev and test sets
read from the validation reports (their ``groups``, :func:`groups_from_reports`).

Example::

    find_dev_seen_groups(
        {"train": {"speaker": ["a", "b"]}, "dev": {"speaker": ["a"]}, "test": {"speaker": ["c"]}},
        train=["train"], dev="dev", tests=["test"], fields=["speaker"],
    ).measures  # 'seen speakers only'
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GroupValues = Mapping[str, Mapping[str, Collection[str]]]
"""Split (or eval set ``<corpus>.<split>``) -> group field -> the values it has."""

TRAIN = "train"
DEV = "dev"
CODE = "dev_seen_groups"
"""The validation warning's ``code``."""


def _plural(name: str) -> str:
    return name if name.endswith("s") else f"{name}s"


@dataclass(frozen=True)
class DevGroupFinding:
    """Dev ``dev`` shares all its ``shared`` values of ``field`` with ``train``, while each test
    set of ``unseen`` has that many values train does not have (of ``test_groups`` in all).
    ``corpus``: the dev set's corpus, named in the hint (``None``: not known)."""

    field: str
    dev: str
    shared: int
    unseen: dict[str, int]
    test_groups: dict[str, int]
    train: tuple[str, ...] = (TRAIN,)
    corpus: str | None = None

    @property
    def what(self) -> str:
        """``"speakers"``."""
        return _plural(self.field)

    @property
    def measures(self) -> str:
        """``"seen speakers only"``."""
        return f"seen {self.what} only"

    @property
    def message(self) -> str:
        tests = ", ".join(
            f"{name} has {self._count(n)} train does not have (of {self.test_groups[name]})"
            for name, n in self.unseen.items()
        )
        shared = (
            f"its one {self.field} is"
            if self.shared == 1
            else f"all {self.shared} of its {self.what} are"
        )
        return (
            f"{self.dev} measures {self.measures}: {shared} also in {' and '.join(self.train)}, "
            f"while {tests}; its WER says little about {self.what} the model never heard, and "
            "the model chosen on it may do far worse on them"
        )

    @property
    def hint(self) -> str:
        where = f"corpora.{self.corpus}" if self.corpus else "the corpus"
        return (
            f"give dev {self.what} of its own: for a corpus made from one manifest, one line in "
            f"{where}: holdout: {{manifest: <all utterances>, by: {self.field}, fractions: "
            f"{{dev: 0.1, test: 0.1}}}}; if the task is {self.field}-dependent on purpose, keep "
            f"validation.allow_group_overlap: [{self.field}] and ignore this"
        )

    def _count(self, n: int) -> str:
        return f"{n} {self.field if n == 1 else self.what}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "dev": self.dev,
            "train": list(self.train),
            "shared": self.shared,
            "unseen": dict(self.unseen),
            "test_groups": dict(self.test_groups),
            "measures": self.measures,
            "message": self.message,
            "hint": self.hint,
        }


def _values(groups: GroupValues, split: str, name: str) -> set[str]:
    return {str(v) for v in (groups.get(split) or {}).get(name) or ()} - {""}


def find_dev_seen_groups(
    groups: GroupValues,
    *,
    train: Sequence[str],
    dev: str,
    tests: Sequence[str],
    fields: Sequence[str],
    corpus: str | None = None,
) -> DevGroupFinding | None:
    """The first of ``fields`` (speaker before session) for which every value of ``dev`` is also
    in one of the ``train`` splits while some of ``tests`` has a value none of them has; ``None``
    when there is no such field (dev has a group of its own, no test set has a new one, or the
    splits carry no values of the field)."""
    for name in fields:
        dev_values = _values(groups, dev, name)
        seen = set().union(*(_values(groups, t, name) for t in train))
        if not dev_values or not dev_values <= seen:
            continue
        unseen, totals = {}, {}
        for test in tests:
            values = _values(groups, test, name)
            if values - seen:
                unseen[test], totals[test] = len(values - seen), len(values)
        if unseen:
            return DevGroupFinding(name, dev, len(dev_values), unseen, totals, tuple(train), corpus)
    return None


def split_roles(names: Iterable[str]) -> tuple[list[str], str | None, list[str]]:
    """``(train, dev, tests)`` of a corpus's split names, as validation reads them: the split
    named ``train``, the one named ``dev`` (the split a run selects on,
    :func:`asrflow.project.dev_set`), and every other split as a test set."""
    names = list(names)
    train = [TRAIN] if TRAIN in names else []
    dev = DEV if DEV in names else None
    return train, dev, [n for n in names if n not in (TRAIN, DEV)]


def corpus_finding(
    groups: GroupValues, fields: Sequence[str], corpus: str | None = None
) -> DevGroupFinding | None:
    """:func:`find_dev_seen_groups` over one corpus's splits (:func:`split_roles`)."""
    train, dev, tests = split_roles(groups)
    if not train or dev is None:
        return None
    return find_dev_seen_groups(
        groups, train=train, dev=dev, tests=tests, fields=fields, corpus=corpus
    )


def groups_from_reports(reports: Iterable[Mapping[str, Any]]) -> tuple[dict, list[str], set]:
    """The ``groups`` of validation reports (:meth:`asrflow.data.validate.Report.to_dict`) keyed
    by eval set (``<corpus>.<split>``), their ``group_fields`` in order, and the corpora whose
    report has no ``groups`` (written before reports carried them)."""
    groups: dict[str, Mapping[str, Collection[str]]] = {}
    fields: list[str] = []
    missing: set[str] = set()
    for report in reports:
        corpus = report["corpus"]
        if "groups" not in report:
            missing.add(corpus)
            continue
        for split, by_field in report["groups"].items():
            groups[f"{corpus}.{split}"] = by_field
        for name in (report.get("config") or {}).get("group_fields") or ():
            if name not in fields:
                fields.append(name)
    return groups, fields, missing


def run_finding(
    reports: Iterable[Mapping[str, Any]],
    *,
    train_corpora: Sequence[str],
    dev_set: str,
    test_sets: Sequence[str],
) -> DevGroupFinding | None:
    """:func:`find_dev_seen_groups` for a run: its train splits (``<corpus>.train`` of each of
    ``train_corpora``), its dev set and its test sets (``<corpus>.<split>``), their values from the
    corpora's validation ``reports``. ``None`` too when the report of a train corpus or of the
    dev set's has no ``groups`` (it cannot tell)."""
    groups, fields, missing = groups_from_reports(reports)
    dev_corpus = dev_set.rpartition(".")[0]
    if missing & {*train_corpora, dev_corpus}:
        return None
    train = [f"{c}.{TRAIN}" for c in train_corpora]
    tests = [t for t in test_sets if t != dev_set and t not in train]
    return find_dev_seen_groups(
        groups,
        train=train,
        dev=dev_set,
        tests=tests,
        fields=fields or ("speaker", "session"),
        corpus=dev_corpus,
    )
