# Config validation, wildcard constraints and named input functions shared by all stages.

import os

from snakemake.exceptions import WorkflowError

from asrflow import config_check, layout, project, runs
from asrflow.artifacts import BASELINE, is_average
from asrflow.data.audio_state import refresh_audio_state
from asrflow.errors import AsrflowError
from asrflow.params import canonical
from asrflow.lineage import with_init_runs
from asrflow.replicas import expand_replicas, replica_runs
from asrflow.settings import with_defaults, with_first_run_as_baseline
from asrflow.recipe.load import AUDIT_SECTIONS
from asrflow.recipe.rules import RULES_VERSION
from asrflow.train.run.launch import train_resources
from asrflow.workflow import share_package_with_jobs

share_package_with_jobs(f"{workflow.basedir}/src")

# a bad config or recipe stops here with one line naming the key (not Snakemake's dump of the
# schema, nor a recipe error inside the first rule that reads a recipe)
try:
    # config/config.schema.yaml's defaults filled in, as snakemake.utils.validate would
    config.update(with_defaults(config, source="config"))
    # a run that names no tokenizer gets <corpus>_auto (model_type auto), its defaults filled
    # (before replicas are expanded: the schema has no place for replica_of)
    config.update(with_defaults(project.with_default_tokenizers(config), source="config"))
except AsrflowError as e:
    raise WorkflowError(str(e)) from None  # names the key, already
try:
    # the report's baseline by default: the first run as written (the keys are sorted below)
    config.update(with_first_run_as_baseline(config))
    # a run with seeds: [0, 1] becomes the runs <run>-seed0 and <run>-seed1 (asrflow.replicas)
    config.update(expand_replicas(config))
    # init: {run: <parent>} starts from the parent's selected package (asrflow.lineage)
    config.update(with_init_runs(config))
    config_check.check_config(config)
    # every run's recipe and overrides, so that a bad one stops here naming the run and the file
    runs.check_recipes(config)
except AsrflowError as e:
    raise WorkflowError(f"config, {e}") from None
# Settings reach the rules as params, which Snakemake compares by their repr: with every
# mapping's keys sorted, reordering keys in a config file reruns nothing.
config.update(canonical(config))


wildcard_constraints:
    corpus=r"[A-Za-z0-9_\-]+",
    split=r"[A-Za-z0-9_]+",
    tokenizer=r"[A-Za-z0-9_\-]+",
    run=r"[A-Za-z0-9_\-]+",
    artifact=r"[A-Za-z0-9_.\-]+",
    average=r"[A-Za-z0-9_.\-]+\.ave_[0-9]+best",
    eval_set=r"[A-Za-z0-9_\-]+\.[A-Za-z0-9_]+",


def source_manifest(wildcards):
    """The manifest (or Kaldi dir) that the import of one split (or of 'all') reads."""
    return project.source_manifest(config, wildcards.corpus, wildcards.split)


def audio_state(wildcards):
    """The split's audio state file, refreshed now: rewritten (which reruns the import) only when
    audio that the last import read has changed since (asrflow.data.audio_state)."""
    corpus, split = wildcards.corpus, wildcards.split
    state = layout.audio_state(corpus, split)
    before = os.stat(state).st_mtime_ns if os.path.exists(state) else None
    refresh_audio_state(state, layout.prov(layout.imported(corpus, split)))
    if os.stat(state).st_mtime_ns != before:
        forget_file_inventory()
    return state


def forget_file_inventory():
    """Make Snakemake look at the disk again: it lists each directory once per DAG build, so
    a state file written after its directory was listed (another split's) would count as
    missing."""
    cache = workflow.iocache
    cache.clear()
    for exists in (cache.exists_local, cache.exists_in_storage):
        getattr(exists, "has_inventory", set()).clear()


def split_cuts(wildcards):
    """Split name -> imported cuts of every split of a corpus (after holdout, if any)."""
    corpus = wildcards.corpus
    if project.uses_holdout(config, corpus):
        holdout_dir = checkpoints.holdout_split.get(corpus=corpus).output.splits
        return {s: f"{holdout_dir}/{s}.jsonl.gz" for s in project.splits(config, corpus)}
    return {s: layout.imported(corpus, s) for s in project.splits(config, corpus)}


def validated_split(corpus, split):
    """The validated cuts of one split (an output of the validate_corpus checkpoint)."""
    validated = checkpoints.validate_corpus.get(corpus=corpus).output.cuts
    return f"{validated}/{split}.jsonl.gz"


def validated_cuts(wildcards):
    """The validated cuts of the split rule filter_split filters."""
    return validated_split(wildcards.corpus, wildcards.split)


def filtered_split(corpus, split):
    """The filtered cuts of one split; every consumer of filtered data goes through here.

    Asking the validate_corpus checkpoint first makes Snakemake re-evaluate the consumer once
    validation has run, so a consumer whose split came out byte-identical is skipped instead of
    inheriting the "upstream job will run" verdict of the first DAG pass.
    """
    checkpoints.validate_corpus.get(corpus=corpus)
    return layout.filtered(corpus, split)


def split_to_shard(wildcards):
    """The filtered split that rule shard_split writes as shards."""
    return filtered_split(wildcards.corpus, wildcards.split)


def tokenizer_train_cuts(wildcards):
    """The filtered train split of the tokenizer's corpus: the only text a tokenizer sees."""
    return filtered_split(config["tokenizers"][wildcards.tokenizer]["corpus"], "train")


def all_targets():
    """Everything `snakemake` builds by default."""
    return project.all_targets(config)


def import_format(wildcards):
    """The importer for a corpus: the demo corpus is written as NeMo manifests."""
    source = config["corpora"][wildcards.corpus]["source"]
    return "nemo" if source == "synthetic" else source


def tokenizer_settings(wildcards):
    """The tokenizer's settings without the corpus name (that is an input, not a parameter)."""
    settings = dict(config["tokenizers"][wildcards.tokenizer])
    del settings["corpus"]
    return settings


def run_train_inputs(wildcards):
    """Filtered train splits of a run's corpora (and the shards of sharded ones), its dev split
    and its tokenizer."""
    run = wildcards.run
    r = project.run(config, run)
    inputs = {}
    sharded = project.sharded_corpora(config)
    for i, corpus in enumerate(project.run_corpora(config, run)):
        inputs[f"train_{i}"] = filtered_split(corpus, "train")
        # a sharded corpus's train audio is read from its shards
        if corpus in sharded:
            inputs[f"shards_{i}"] = layout.shards(corpus, "train")
    inputs["dev"] = filtered_split(project.run_dev_corpus(config, run), "dev")
    inputs["bpe_model"] = project.run_tokenizer_file(config, run, "bpe.model")
    inputs["tokens"] = project.run_tokenizer_file(config, run, "tokens.txt")
    return inputs


def init_tokenizer_inputs(wildcards):
    """What init_tokenizer reads for a run with tokenizer init: the starting model (its
    config.yaml) and the run's filtered splits, whose text it checks the tokenizer can spell."""
    run = wildcards.run
    inputs = {"model": runs.init_tokenizer_model(config, run)}
    for i, corpus in enumerate(project.run_corpora(config, run)):
        inputs[f"train_{i}"] = filtered_split(corpus, "train")
    inputs["dev"] = filtered_split(project.run_dev_corpus(config, run), "dev")
    return inputs


def run_plan_cuts(wildcards):
    """What a run's plan reads: the filtered train splits it trains on (train_0..n), and a
    fine-tuning run's parent's train summary (its peak LR)."""
    inputs = {k: v for k, v in run_train_inputs(wildcards).items() if k.startswith("train_")}
    return {**inputs, **runs.parent_summary(config, wildcards.run)}


def run_plan(wildcards):
    """The run's plan (recipe: auto), read by its audit, smoke run and training; else nothing."""
    return runs.plan_inputs(config, wildcards.run)


def run_audit_inputs(wildcards):
    """What the batch audit reads: the run's filtered train splits and its tokenizer."""
    inputs = run_train_inputs(wildcards)
    del inputs["dev"]
    return inputs


def audit_recipe(wildcards):
    """The sections of the run's recipe the batch audit reads (batching, loss, augmentation)."""
    return runs.recipe_params(config, wildcards.run, sections=AUDIT_SECTIONS)


def run_recipe(wildcards):
    """The run's recipe with its overrides and hardware (resources) merged in, parsed: the
    settings that can change the weights, and the operational ones (runs.recipe_params).
    """
    return runs.recipe_params(config, wildcards.run)


def smoke_recipe(wildcards):
    """The run's recipe cut down to the smoke run: a few CPU steps."""
    return runs.recipe_params(config, wildcards.run, smoke=True)


def run_threads(wildcards):
    """CPU cores of a train job: cpus_per_device x devices (or cpus_per_device on the CPU)."""
    res = project.run(config, wildcards.run)["resources"]
    return res["cpus_per_device"] * max(1, res["devices"])


def run_runtime(wildcards, attempt):
    """The train job's time limit in minutes: runs.<run>.resources.runtime, times the attempt
    (a retry after a time-out resumes from last.ckpt with more time)."""
    return project.run(config, wildcards.run)["resources"]["runtime"] * attempt


def run_slurm(resource):
    """A resource function: the train job's `resource` for SLURM (gpu, cpus_per_gpu, nodes, and
    for a run whose ranks srun starts mpi, tasks_per_node, ...; asrflow.train.run.launch), None
    (unset) where its launch does not use it."""

    def value(wildcards):
        return train_resources(project.run(config, wildcards.run)["resources"])[resource]

    value.__name__ = f"run_slurm_{resource}"
    return value


def run_init_weights(wildcards):
    """The weights file a run starts from (runs.<run>.init.model), if it has one, and the
    package's config.yaml its model is taken from (init.architecture: package)."""
    return runs.init_inputs(config, wildcards.run)


def average_criterion(wildcards):
    """(monitor, k) of the average being made, from the run's recipe."""
    return runs.average_criterion(config, wildcards.run, wildcards.average)


def export_inputs(wildcards):
    """What an artifact is exported from: the trained run, its tokenizer, for an average the
    averaged weights, for a run with LoRA adapters its start weights; the baseline only from
    the run's init weights."""
    run = wildcards.run
    if wildcards.artifact == BASELINE:
        return run_init_weights(wildcards)
    inputs = {
        "summary": layout.run_file(run, "train", "summary.json"),
        "artifacts": layout.run_file(run, "train", "artifacts"),
        "bpe_model": project.run_tokenizer_file(config, run, "bpe.model"),
        "tokens": project.run_tokenizer_file(config, run, "tokens.txt"),
    }
    if is_average(wildcards.artifact):
        inputs["averaged"] = layout.average_file(run, wildcards.artifact)
    if runs.trains_adapters(config, run):  # the adapter-only export is a difference from them
        inputs["init_weights"] = runs.init_inputs(config, run)["init_weights"]
    return inputs


def eval_inputs(wildcards):
    """An exported artifact and the eval set it is judged on: its split's validated cuts, all
    of them (the training filter never shrinks an eval set; evaluation.filter may, counted in
    the summary); and the run's word LM when evaluation.decoding.mode is lexicon_lm or auto
    (rule word_lm then records the run's choice)."""
    corpus, split = project.eval_set_split(config, wildcards.eval_set)
    inputs = {
        "package": layout.export_dir(wildcards.run, wildcards.artifact),
        "cuts": validated_split(corpus, split),
    }
    if config["evaluation"]["decoding"].get("mode") in ("lexicon_lm", "auto"):
        inputs["word_lm"] = layout.word_lm_file(wildcards.run)
    return inputs


def word_lm_dev(wildcards):
    """The run's dev split, read by rule word_lm for decoding mode auto only (never a test)."""
    if config["evaluation"]["decoding"].get("mode") != "auto":
        return []
    return [filtered_split(project.run_dev_corpus(config, wildcards.run), "dev")]


def run_train_splits(wildcards):
    """The filtered train splits of a run's corpora (nothing else: the word LM's only input)."""
    return [
        filtered_split(corpus, "train")
        for corpus in project.run_corpora(config, wildcards.run)
    ]


def eval_threads(wildcards):
    res = config["evaluation"]["resources"]
    return res["cpus_per_device"] * max(1, res["devices"])


def eval_runtime(wildcards, attempt):
    """An evaluation's time limit in minutes, longer on each retry."""
    return config["evaluation"]["resources"]["runtime"] * attempt


def run_dev_set(wildcards):
    """The eval set a run selects on: its dev corpus's dev split."""
    return project.dev_set(config, wildcards.run)


def run_train_corpora(wildcards):
    """The corpora whose train splits a run trains on."""
    return project.run_corpora(config, wildcards.run)


def run_held_out_test_sets(wildcards):
    """A run's eval sets other than its dev set and its train splits."""
    return project.held_out_test_sets(config, wildcards.run)


def run_validation_reports(wildcards):
    """The validation reports of the corpora a run trains, selects and is tested on: their group
    values say whether its dev set measures seen speakers only. Asking the validate_corpus
    checkpoint (as filtered_split does) keeps a revalidation that changed nothing from rerunning
    the selection."""
    return [
        checkpoints.validate_corpus.get(corpus=corpus).output.report
        for corpus in project.selection_corpora(config, wildcards.run)
    ]


def eval_slice_fields(wildcards):
    """The fields an eval set's figures are broken down by (its corpus's slice_fields)."""
    return project.slice_fields(config, wildcards.eval_set)


def run_exports(wildcards):
    """Every package a run exports (one per artifact): what its selection chooses among."""
    return [layout.export_dir(wildcards.run, a) for a in runs.run_artifacts(config, wildcards.run)]


def dev_evaluations(wildcards):
    """Every artifact of a run evaluated on the run's dev set: what select_model chooses from."""
    return runs.dev_evaluation_files(config, wildcards.run, "summary.json")


def dev_utterances(wildcards):
    """The per-utterance scores of those dev evaluations (each beside its summary.json): what
    the significance of the average's difference is computed from."""
    return runs.dev_evaluation_files(config, wildcards.run, "utterances.csv")


def slice_evaluations(wildcards):
    """Every artifact of a run evaluated on one eval set."""
    return [
        layout.eval_file(wildcards.run, a, wildcards.eval_set, "summary.json")
        for a in runs.run_artifacts(config, wildcards.run)
    ]


def settled_comparison(wildcards):
    """The comparison table, asked for only after every run's train checkpoint has settled. A
    plain path would make a job after the report rerun whenever a checkpoint upstream of the
    report is pending (Snakemake counts the report as updated until the checkpoint says it is
    not), e.g. after a revalidation that changed nothing."""
    for run in config.get("runs", {}):
        checkpoints.train.get(run=run)
    return layout.report_file("comparison.csv")


def run_completed(run):
    """Whether a run's training completed; a failed run is a result (its summary says why),
    so it enters the report without evaluations. Asks the train checkpoint first."""
    import json

    summary = checkpoints.train.get(run=run).output.summary
    with open(summary, encoding="utf-8") as f:
        return json.load(f).get("status") == "completed"


def report_inputs(wildcards):
    """Train summaries of every run; evaluations (summaries and per-utterance scores),
    selections and plots of completed ones."""
    inputs = {
        "train": [],
        "evaluations": [],
        "utterances": [],
        "selected": [],
        "plots": [],
        "audits": [],
    }
    for run in config.get("runs", {}):
        inputs["train"].append(layout.run_file(run, "train", "summary.json"))
        inputs["audits"].append(layout.run_file(run, "audit", "batches.png"))
        if not run_completed(run):
            continue
        inputs["selected"].append(layout.selected_file(run))
        inputs["plots"].append(layout.report_file("plots", run, "learning_curves.png"))
        for eval_set in project.eval_sets(config, run):
            inputs["plots"].append(
                layout.report_file("plots", run, f"{eval_set}.slices.png")
            )
            for artifact in runs.run_artifacts(config, run):
                inputs["evaluations"].append(
                    layout.eval_file(run, artifact, eval_set, "summary.json")
                )
                inputs["utterances"].append(
                    layout.eval_file(run, artifact, eval_set, "utterances.csv")
                )
    return inputs
