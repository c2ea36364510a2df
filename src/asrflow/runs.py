"""What a run's recipe decides when the DAG is built, and what its rules are given of it.

A run's recipe with its overrides (hardware from ``runs.<run>.resources``; the smoke run's few
single-CPU steps), the params of the training and evaluation rules (settings that change a result,
and :class:`~asrflow.params.Operational` ones that do not), the artifacts a run exports and the
sampling rates its model expects. Paths and the plain config lookups are in :mod:`asrflow.layout`.

Every function takes the config as the schema check leaves it (``rules/common.smk``;
:func:`asrflow.settings.with_defaults`), the schema's defaults filled in: a default is never
repeated here.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asrflow.artifacts import artifact_names, average_name
from asrflow.errors import AsrflowError
from asrflow.evaluate.scoring import SCORING_VERSION
from asrflow.evaluate.versions import DECODER_VERSION
from asrflow.export.find import PACKAGE_FILES, find_config, model_sample_rate, tracked_weights
from asrflow.layout import eval_file, plan_file, recipe_file, run_file, selected_package_files
from asrflow.params import Operational
from asrflow.project import (
    INIT_TOKENIZER,
    Config,
    dev_set,
    run,
    run_corpora,
    run_dev_corpus,
    sharded_corpora,
)
from asrflow.recipe.checks import check_overrides
from asrflow.recipe.inherit import (
    ARCHITECTURE_KEYS,
    read_architecture,
    takes_package_architecture,
)
from asrflow.recipe.load import load_recipe, read_recipe_yaml
from asrflow.recipe.mappings import deep_merge
from asrflow.recipe.plan import explicit_keys, is_auto
from asrflow.recipe.sections import Recipe
from asrflow.types import Pathlike


def train_overrides(config: Config, name: str) -> dict[str, Any]:
    """A run's recipe overrides with the trainer's hardware taken from ``runs.<run>.resources``."""
    r = run(config, name)
    res = r["resources"]
    devices = int(res["devices"])
    overrides = {k: dict(v) if isinstance(v, Mapping) else v for k, v in r["overrides"].items()}
    # overrides name only the recipe sections they change: an absent one is not overridden
    trainer = dict(overrides.get("trainer", {}))
    trainer.update(
        devices=max(1, devices),
        num_nodes=int(res["nodes"]),
        accelerator="gpu" if devices > 0 else "cpu",
    )
    overrides["trainer"] = trainer
    return overrides


def smoke_overrides(config: Config, name: str) -> dict[str, Any]:
    """The overrides of a run's smoke test: same recipe, a few single-CPU steps."""
    overrides = train_overrides(config, name)
    steps = int(config["smoke"]["max_steps"])
    overrides["trainer"].update(
        devices=1,
        num_nodes=1,
        accelerator="cpu",
        precision="32-true",
        max_steps=steps,
        val_check_interval=steps,
        accumulate_grad_batches=1,
    )
    scheduler = dict(overrides.get("scheduler", {}))
    scheduler.update(warmup=1, total_steps=None)
    overrides["scheduler"] = scheduler
    batching = dict(overrides.get("batching", {}))
    batching.update(num_buckets=2, num_workers=0)
    overrides["batching"] = batching
    # a few steps cannot learn anything: blank outputs are expected, not a warning
    diagnostics = dict(overrides.get("diagnostics", {}))
    diagnostics.update(blank_warning_after_warmup=False)
    overrides["diagnostics"] = diagnostics
    return overrides


def run_recipe(config: Config, name: str, *, smoke: bool = False) -> Recipe:
    """A run's recipe with its overrides (read when the DAG is built); ``smoke``: as its smoke
    run trains it (:func:`smoke_overrides`). An error in ``runs.<run>.overrides`` names that
    key (:func:`~asrflow.recipe.checks.check_overrides`), one in the recipe the file.

    Parsed once per DAG build: every rule's params and inputs ask for the same run's recipe, so
    the parsed recipe is kept while its file (size, modification time) and overrides stay the
    same."""
    path = recipe_file(run(config, name)["recipe"])
    overrides = smoke_overrides(config, name) if smoke else train_overrides(config, name)
    given, merged = (
        json.dumps(o, sort_keys=True, default=str)
        for o in (run(config, name)["overrides"], overrides)
    )
    return _parsed_run_recipe(name, str(path), _file_state(path), given, merged, smoke)


def _file_state(path: Pathlike) -> tuple[int, int] | None:
    """(size, mtime_ns) of a file, ``None`` when it cannot be read: what invalidates a parse."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


@functools.cache
def _parsed_run_recipe(
    name: str, path: str, state: tuple[int, int] | None, given: str, merged: str, smoke: bool
) -> Recipe:
    """:func:`run_recipe`'s parse, by value of everything it reads (``state``: the file's)."""
    del state  # a part of the cache key only
    check_overrides(json.loads(given), name)
    data = _recipe_data(name, path)
    source = f"{path} (run {name}{' as its smoke run trains it' if smoke else ''})"
    return load_recipe(data, json.loads(merged), source=source)


def check_recipes(config: Config) -> None:
    """Read and check every run's recipe with its overrides, as the run trains it and as its
    smoke run does, and the sampling rate its frontend names: what ``rules/common.smk`` runs
    with the config checks, so that a bad recipe or override stops the workflow before the DAG
    is built, naming the run and the recipe file or ``runs.<run>.overrides.<key>``, instead of
    inside the first rule that asks for a recipe (validate_corpus, through
    :func:`frontend_rates`)."""
    for name in config["runs"]:
        recipe = run_recipe(config, name)
        run_recipe(config, name, smoke=True)
        try:
            model_sample_rate(recipe.model.get("frontend_conf"))
        except AsrflowError as e:
            path = recipe_file(run(config, name)["recipe"])
            raise AsrflowError(f"{path} (run {name}): {e}") from None


def _recipe_data(name: str, path: Pathlike) -> Any:
    """The data of a run's recipe file; an unreadable one names ``runs.<run>.recipe``."""
    try:
        return read_recipe_yaml(path)
    except AsrflowError as e:
        raise AsrflowError(f"runs.{name}.recipe: {e}") from None


def frontend_rates(config: Config, corpus: str) -> Operational:
    """``{run: sampling rate its model's frontend expects}`` for the runs that train or validate
    on ``corpus`` (ESPnet's ``frontend_conf.fs``, 16000 when the recipe gives none; a
    fine-tuning run's from its package, :mod:`asrflow.recipe.inherit`).

    Operational (:class:`~asrflow.params.Operational`): the validation report and its
    mixed-rates warning name these rates, but no check, cut or error depends on them (audio is
    resampled when loaded). As a plain dict this param made adding a run to the config, or
    renaming one, revalidate the corpus, and so retrain every run already trained on it.
    The report therefore lists the runs of the config it was last validated under.

    Only the rate is read of each recipe (its file and overrides, not parsed as a whole): the
    recipes are checked with the config (:func:`check_recipes`), so that a bad one is not
    reported as a failure of this corpus's validation."""
    rates = {}
    for name in config["runs"]:
        if corpus in run_corpora(config, name) or run_dev_corpus(config, name) == corpus:
            overrides, init = run(config, name)["overrides"], run(config, name).get("init")
            if "fs" not in overrides.get("frontend_conf", {}):
                if takes_package_architecture(init):
                    if not Path(init["model"]).exists():
                        continue  # another run of this DAG makes it: its rate is not known yet
                    rates[name] = model_sample_rate(
                        read_architecture(init["model"])[1].get("frontend_conf")
                    )
                    continue
                if is_auto(run(config, name)["recipe"]):
                    continue  # its plan takes the corpus's own rate
            path = recipe_file(run(config, name)["recipe"])
            data = deep_merge(_recipe_data(name, path), overrides)
            rates[name] = model_sample_rate(data.get("frontend_conf"))
    return Operational(rates)


def trains_from_shards(config: Config, name: str) -> bool:
    """Whether run ``name`` reads its train audio from shards (its corpora have ``shards:``;
    :func:`asrflow.train.batches.shard_stream.run_shards` refuses a run that shards only some of
    them). Its loader workers then deal the shards, so their number is a weight-changing setting
    (:data:`~asrflow.recipe.sections.SHARD_DEALING_KEYS`)."""
    sharded = set(sharded_corpora(config))
    return any(corpus in sharded for corpus in run_corpora(config, name))


def init_tokenizer_model(config: Config, name: str) -> str:
    """What rule init_tokenizer reads for ``tokenizer: init``: the starting model's
    ``config.yaml`` (found in ``init.model``, or the parent's published package for
    ``init.run``), or the model's path as given when another rule makes it."""
    init = run(config, name)["init"]
    return _package_config(init) or str(init["model"])


def _package_config(init: Mapping[str, Any]) -> str | None:
    """The starting model's ``config.yaml`` as a rule input: the parent's published one for
    ``init.run``, the one :func:`~asrflow.export.find.find_config` finds for an existing
    ``init.model``, else None (none there, or the model is made by another rule)."""
    if init.get("run"):
        return _published(init["run"])["config.yaml"]
    found = find_config(init["model"]) if Path(init["model"]).exists() else None
    return None if found is None else str(found)


def _published(parent: str) -> dict[str, str]:
    """The files of run ``parent``'s published selected package, by name (publish_selected)."""
    return dict(zip(PACKAGE_FILES, selected_package_files(parent), strict=True))


def init_inputs(config: Config, name: str) -> dict[str, str]:
    """The files a fine-tuning run starts from, as rule inputs: ``init_weights`` (the weights
    of ``init.model``, or the path as given when another rule makes it; for ``init.run`` the
    parent's :func:`~asrflow.layout.selected_package`) and, when its model is
    the package's (:mod:`asrflow.recipe.inherit`), ``init_config``: the package's config.yaml,
    so that an edited architecture reruns the run. ``{}`` for a run from scratch."""
    init = run(config, name).get("init")
    if not init:
        return {}
    if init.get("run"):  # the parent's published package (rule publish_selected)
        inputs = {"init_weights": _published(init["run"])["model.pth"]}
    else:
        inputs = {"init_weights": tracked_weights(init["model"])}
    config_yaml = _package_config(init) if takes_package_architecture(init) else None
    if config_yaml is not None:  # none: the train job says what to do
        inputs["init_config"] = config_yaml
    return inputs


def recipe_params(
    config: Config, name: str, *, smoke: bool = False, sections: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """What a training rule (audit, smoke, train) is given of its recipe: the parsed, canonical
    settings that can change the weights (``settings``: comments, key order and spelling of the
    YAML never rerun a job), the others as :class:`~asrflow.params.Operational` (``operational``:
    a change reruns nothing) and the recipe's name (``name``). ``sections``: only these
    top-level sections (a rule that reads no more, such as the batch audit). On a run that
    trains from shards the loader workers are settings (:func:`trains_from_shards`). A run with
    ``recipe: auto``, or one that takes its model from its ``init`` package, also gets
    ``explicit``: the dotted keys its overrides set, which neither its plan's values
    (:func:`asrflow.recipe.plan.apply_plan`) nor the package's model keys
    (:func:`asrflow.recipe.inherit.inherit_architecture`) replace."""
    recipe = run_recipe(config, name, smoke=smoke)
    overrides = smoke_overrides(config, name) if smoke else train_overrides(config, name)
    sharded = trains_from_shards(config, name)
    settings = recipe.identity(sharded=sharded)
    operational = recipe.operational(sharded=sharded)
    if sections is not None:
        settings = {k: v for k, v in settings.items() if k in sections}
        operational = {k: v for k, v in operational.items() if k in sections}
    params = {
        "settings": settings,
        "operational": Operational(operational),
        "name": run(config, name)["recipe"],
    }
    if is_auto(run(config, name)["recipe"]) or takes_package_architecture(
        run(config, name).get("init")
    ):
        # the keys this job's overrides set: neither a plan's value nor the starting package's
        # model keys (asrflow.recipe.inherit) replace one
        params["explicit"] = explicit_keys(overrides)
    return params


def plan_inputs(config: Config, name: str) -> dict[str, str]:
    """``{"plan": plan file}`` for a run with ``recipe: auto`` (rule plan_run), else ``{}``."""
    return {"plan": plan_file(name)} if is_auto(run(config, name)["recipe"]) else {}


def plan_params(config: Config, name: str) -> dict[str, Any]:
    """What rule plan_run is given: the keys the run's overrides set (reported as overridden),
    whether all its train corpora are synthetic speech, and (``inherited``, only for a run
    that has them) the model keys the run takes from its ``init`` package
    (:mod:`asrflow.recipe.inherit`)."""
    r = run(config, name)
    corpora = run_corpora(config, name)
    params = {
        "recipe": r["recipe"],
        "explicit": explicit_keys(r["overrides"]),
        "synthetic": all(config["corpora"][c]["source"] == "synthetic" for c in corpora),
    }
    if takes_package_architecture(r.get("init")):
        # a fine-tuning run's model keys are its starting package's, not the plan's
        params["inherited"] = list(ARCHITECTURE_KEYS)
    if r.get("init"):
        params["lineage"] = lineage_params(config, name)
    return params


def lineage_params(config: Config, name: str) -> dict[str, Any]:
    """What the plan of a fine-tuning run knows of its start before any job runs (its LR and
    warmup follow it: :func:`asrflow.recipe.rules.fine_tuning`): ``parent`` (``init.run``, or
    ``init.model`` as given) and ``generation`` (1 when the parent run itself starts from
    another model, else 0; a model from elsewhere counts as trained from scratch), and
    ``new_vocabulary: True`` only for a run whose tokenizer is neither the package's
    (``init``, or ``reuse_tokenizer``) nor its parent run's: its output layers start fresh."""
    r = run(config, name)
    init = r["init"]
    parent = init.get("run")
    parent_run = run(config, parent) if parent is not None else None
    if parent_run is None:
        out = {"parent": str(init["model"]), "generation": 0}
    else:
        out = {"parent": parent, "generation": 1 if parent_run.get("init") else 0}
    tokenizer = r.get("tokenizer", INIT_TOKENIZER)
    same = (
        tokenizer == INIT_TOKENIZER
        or init.get("reuse_tokenizer")  # checked equal to the package's before training
        or (parent_run is not None and tokenizer == parent_run.get("tokenizer"))
    )
    if not same:
        out["new_vocabulary"] = True
    return out


def parent_summary(config: Config, name: str) -> dict[str, str]:
    """The parent run's train summary for the plan of a run with ``init.run`` (its peak LR,
    :func:`asrflow.recipe.plan.parent_peak_lr`), else nothing."""
    init = run(config, name).get("init") or {}
    if init.get("run") is None or not is_auto(run(config, name)["recipe"]):
        return {}
    return {"parent_summary": run_file(init["run"], "train", "summary.json")}


def eval_params(config: Config) -> dict[str, Any]:
    """What ``evaluate`` is given of ``evaluation``: the scoring contract, the scorer's and the
    decoder's versions, the decoding settings with the long-form windows, and the eval filter
    (they change the figures; a bump of :data:`~asrflow.evaluate.scoring.SCORING_VERSION` or
    :data:`~asrflow.evaluate.versions.DECODER_VERSION` reruns every evaluation), and
    ``operational`` (device, batch_seconds: they do not, the decoder being batch-invariant)."""
    ev = config["evaluation"]
    return {
        "scoring": ev["scoring"],
        "scoring_version": SCORING_VERSION,
        "decoder_version": DECODER_VERSION,
        "dtype": ev["dtype"],
        "decoding": ev["decoding"],
        "window_seconds": ev["window_seconds"],
        "window_overlap_seconds": ev["window_overlap_seconds"],
        "filter": ev["filter"],
        "operational": Operational({k: ev[k] for k in ("device", "batch_seconds")}),
    }


def trains_adapters(config: Config, name: str) -> bool:
    """Whether run ``name`` trains LoRA adapters (``init.adapter``): its exports then also hold
    the adapter-only difference from its start weights (:mod:`asrflow.export.adapter`)."""
    init = run(config, name).get("init")
    return bool(init and init.get("adapter"))


def has_baseline(config: Config, name: str) -> bool:
    """A fine-tuning run whose init model comes with its ESPnet config.yaml (an exported package,
    another run's selected package or an ESPnet model directory) has a ``baseline`` artifact:
    its start weights."""
    init = run(config, name).get("init")  # no default: a run without init starts from scratch
    if not init:
        return False
    if init.get("run"):
        return True  # another run's selected package: it has its config.yaml
    try:
        return find_config(init["model"]) is not None
    except AsrflowError:
        return False  # not there yet (made by another rule) or unusable: the train rule says why


def run_artifacts(config: Config, name: str) -> list[str]:
    """The artifacts a run exports (see :mod:`asrflow.artifacts`)."""
    return artifact_names(run_recipe(config, name).criteria, has_baseline(config, name))


def dev_evaluation_files(config: Config, name: str, file: str) -> list[str]:
    """``file`` (``summary.json``, ``utterances.csv``) of every artifact of a run evaluated on
    the run's dev set: what select_model reads. Never a test set."""
    dev = dev_set(config, name)
    return [eval_file(name, artifact, dev, file) for artifact in run_artifacts(config, name)]


def average_criterion(config: Config, name: str, average: str) -> tuple[str, int]:
    """(monitor, k) of an average artifact name such as ``valid.loss.ave_3best``."""
    for c in run_recipe(config, name).criteria:
        if average_name(c.monitor, c.top_k) == average:
            return c.monitor, c.top_k
    raise AsrflowError(f"run {name!r} has no criterion whose average is called {average!r}")
