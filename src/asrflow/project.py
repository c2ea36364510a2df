"""What the config declares: corpora and their splits, runs and their corpora and tokenizers,
the eval sets each run is judged on, and the workflow's default targets.

Functions of the validated config (``config``, with the schema's defaults filled in) and a name;
where the artifacts they name live is :mod:`asrflow.layout`, what a run's recipe decides is
:mod:`asrflow.runs`. Torch-free: the DAG is built from them.

Example::

    eval_sets(config, "baseline")       # ["demo.dev", "demo.test"]
    source_manifest(config, "mine", "train")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.layout import (
    ALL,
    filtered,
    report_file,
    run_file,
    shards,
    synthetic_manifest,
    tokenizer_file,
    validation_report,
)

Config = Mapping[str, Any]
SYNTHETIC_SPLITS = ("train", "dev", "test")


def sharded_corpora(config: Config) -> list[str]:
    """Corpora whose train split is written as shards (``corpora.<c>.shards`` set)."""
    return [name for name, c in config["corpora"].items() if c.get("shards") is not None]


AUTO_TOKENIZER = "{corpus}_auto"
"""The tokenizer of a run from scratch that names none: ``model_type: auto`` on its first
corpus."""
INIT_TOKENIZER = "init"
"""``runs.<run>.tokenizer: init``: the starting model's own tokenizer
(:mod:`asrflow.export.package_tokenizer`), the default of a run whose ``init`` carries one."""
_BARE_WEIGHTS = (".pth", ".ckpt")


def with_default_tokenizers(config: Config) -> dict[str, Any]:
    """``config`` with every run that names no tokenizer given one: :data:`INIT_TOKENIZER` when
    it fine-tunes a model that carries a tokenizer (``init.run``, or an ``init.model`` that is
    not a bare ``.pth``/``.ckpt``), else :data:`AUTO_TOKENIZER` of its first corpus, added to
    ``tokenizers`` (if not there) as ``model_type: auto``: the two keys a run may leave out are
    its recipe (``auto``, the schema's default) and its tokenizer. Not modified in place; the
    schema's defaults of an added tokenizer are for the caller to fill."""
    tokenizers = dict(config.get("tokenizers") or {})
    runs: dict[str, Any] = {}
    for name, r in (config.get("runs") or {}).items():
        if r.get("tokenizer"):
            runs[name] = r
            continue
        if _carries_tokenizer(r.get("init")):
            runs[name] = {**r, "tokenizer": INIT_TOKENIZER}
            continue
        corpus = r["corpora"][0]
        tokenizer = AUTO_TOKENIZER.format(corpus=corpus)
        tokenizers.setdefault(tokenizer, {"corpus": corpus, "model_type": "auto"})
        runs[name] = {**r, "tokenizer": tokenizer}
    return {**config, "tokenizers": tokenizers, "runs": runs}


def _carries_tokenizer(init: Mapping[str, Any] | None) -> bool:
    if not init:
        return False
    if init.get("run"):
        return True
    return not str(init.get("model", "")).endswith(_BARE_WEIGHTS)


def run_tokenizer_file(config: Config, name: str, file: str) -> str:
    """``bpe.model`` or ``tokens.txt`` of run ``name``: its tokenizer's (:func:`tokenizer_file`),
    or with ``tokenizer: init`` the copy of its starting model's, ``results/runs/<run>/tokenizer/``
    (rule init_tokenizer), also ``summary.json`` there."""
    tokenizer = run(config, name)["tokenizer"]
    if tokenizer == INIT_TOKENIZER:
        return run_file(name, "tokenizer", file)
    return tokenizer_file(tokenizer, file)


def corpus(config: Config, name: str) -> Mapping[str, Any]:
    try:
        return config["corpora"][name]
    except KeyError:
        known = ", ".join(config.get("corpora", {})) or "none"
        raise AsrflowError(f"unknown corpus {name!r} (config has: {known})") from None


def uses_holdout(config: Config, name: str) -> bool:
    return "holdout" in corpus(config, name)


def splits(config: Config, name: str) -> list[str]:
    """The split names of a corpus, train first."""
    c = corpus(config, name)
    if c["source"] == "synthetic":
        names = list(SYNTHETIC_SPLITS)
    elif "holdout" in c:
        names = ["train", *c["holdout"]["fractions"]]  # the schema fills the default
    else:
        names = list(c["manifests"])
    return sorted(names, key=lambda s: (s != "train", s))


def source_manifest(config: Config, name: str, part: str) -> str:
    """The manifest (or Kaldi dir) the import of ``part`` reads."""
    c = corpus(config, name)
    if c["source"] == "synthetic":
        return synthetic_manifest(name, part)
    if "holdout" in c:
        if part != ALL:
            raise AsrflowError(f"corpus {name!r} is split by holdout; it has no manifest {part!r}")
        return c["holdout"]["manifest"]
    try:
        return c["manifests"][part]
    except KeyError:
        raise AsrflowError(f"corpus {name!r} has no manifest for split {part!r}") from None


def split_sources(config: Config, name: str) -> dict[str, str]:
    """Split -> the manifest (or Kaldi dir) its utterances come from: the holdout manifest for
    every split of a holdout corpus. For messages that must name the file a user can fix."""
    return {
        s: source_manifest(config, name, ALL if uses_holdout(config, name) else s)
        for s in splits(config, name)
    }


def run(config: Config, name: str) -> Mapping[str, Any]:
    try:
        return config["runs"][name]
    except KeyError:
        known = ", ".join(config.get("runs", {})) or "none"
        raise AsrflowError(f"unknown run {name!r} (config has: {known})") from None


def run_corpora(config: Config, name: str) -> list[str]:
    """The corpora whose filtered train splits a run trains on."""
    return list(run(config, name)["corpora"])


def run_dev_corpus(config: Config, name: str) -> str:
    """The corpus whose dev split a run validates on (default: its first train corpus)."""
    r = run(config, name)
    return r.get("dev") or r["corpora"][0]


def eval_set_name(corpus_name: str, split: str) -> str:
    """An eval set is a split of a corpus: ``<corpus>.<split>`` (``demo.dev``)."""
    return f"{corpus_name}.{split}"


def eval_set_split(config: Config, eval_set: str) -> tuple[str, str]:
    """(corpus, split) of an eval set name; an error when the config has no such split."""
    corpus_name, _, split = eval_set.rpartition(".")
    if not corpus_name or split not in splits(config, corpus_name):
        raise AsrflowError(
            f"eval set {eval_set!r}: expected <corpus>.<split> naming a split of a corpus in "
            "config (e.g. demo.test)"
        )
    return corpus_name, split


def dev_set(config: Config, name: str) -> str:
    """The eval set a run selects its model on: the dev split of its dev corpus."""
    return eval_set_name(run_dev_corpus(config, name), "dev")


def eval_sets(config: Config, name: str) -> list[str]:
    """Where a run's artifacts are evaluated: its dev set, the test split of each train corpus
    that has one, then ``evaluation.extra_sets`` (e.g. real messages kept out of training)."""
    sets = [dev_set(config, name)]
    for corpus_name in run_corpora(config, name):
        if "test" in splits(config, corpus_name):
            sets.append(eval_set_name(corpus_name, "test"))
    sets += list(config.get("evaluation", {}).get("extra_sets", []))
    return list(dict.fromkeys(sets))


def test_sets(config: Config, name: str) -> list[str]:
    """A run's eval sets other than its dev set (:func:`eval_sets`)."""
    return [s for s in eval_sets(config, name) if s != dev_set(config, name)]


def held_out_test_sets(config: Config, name: str) -> list[str]:
    """A run's test sets (:func:`test_sets`) other than its own train splits: the sets that can
    hold speakers it never heard. Selection takes exactly these, so an extra eval set of train
    data reruns no selection."""
    train = {f"{c}.train" for c in run_corpora(config, name)}
    return [s for s in test_sets(config, name) if s not in train]


def selection_corpora(config: Config, name: str) -> list[str]:
    """The corpora a run trains on, selects on (its dev corpus) and is tested on (each held-out
    test set's): whose validation reports say whether its dev set measures seen speakers only."""
    corpora = [*run_corpora(config, name), run_dev_corpus(config, name)]
    corpora += [eval_set_split(config, s)[0] for s in held_out_test_sets(config, name)]
    return list(dict.fromkeys(corpora))


def slice_fields(config: Config, eval_set: str) -> list[str]:
    """The manifest fields an eval set's results are broken down by (its corpus's slice_fields)."""
    return list(corpus(config, eval_set_split(config, eval_set)[0])["slice_fields"])


REPORT_TABLES = ("comparison.csv", "comparison.md", "comparison.html", "replicas.csv")


def all_targets(config: Config) -> list[str]:
    """The default targets: validated and filtered corpora, the train shards of sharded corpora,
    trained tokenizers and, when there are runs, every run's train summary, the comparison
    report (which pulls in training, evaluation and selection) and the forest plot of its WER
    differences. The train summaries are asked for here because the report asks for one run's
    training at a time (a checkpoint: what follows depends on how it ended); as targets, the
    train jobs of all runs (and seed replicas) are scheduled at once and run side by side where
    there is room."""
    targets: list[str] = []
    for name in config["corpora"]:
        targets.append(validation_report(name, "txt"))
        targets += [filtered(name, s) for s in splits(config, name)]
    targets += [shards(name, "train") for name in sharded_corpora(config)]
    for name in config.get("tokenizers", {}):
        targets.append(tokenizer_file(name, "tokens.txt"))
    if config.get("runs"):
        targets += [run_file(name, "train", "summary.json") for name in config["runs"]]
        targets += [report_file(t) for t in REPORT_TABLES]
        targets.append(report_file("plots", "differences.png"))
    return targets
