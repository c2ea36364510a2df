"""Where every artifact lives: paths of names (corpus, split, run, artifact, eval set).

One place for result paths, so that rules, scripts and tests agree. Functions return path
*templates* when given wildcard strings (``imported("{corpus}", "{split}")``) and concrete paths
when given names. Everything the workflow writes is under ``results/``, logs under ``logs/``.
What the config declares (corpora, splits, runs, eval sets) is :mod:`asrflow.project`; what a
run's recipe decides (overrides, rule params, artifacts) is :mod:`asrflow.runs`.
"""

from __future__ import annotations

from asrflow.export.find import PACKAGE_FILES
from asrflow.recipe.plan import AUTO_BASE, is_auto

RESULTS = "results"
LOGS = "logs"
ALL = "all"
"""Pseudo split name of a holdout corpus's single manifest before it is split."""


def prov(path: str) -> str:
    """The provenance record that goes with an output: ``<path>.prov.json``."""
    return f"{path}.prov.json"


def log(rule: str, *parts: str) -> str:
    """``logs/<rule>/<part>/.../<last>.log``."""
    return "/".join([LOGS, rule, *parts]) + ".log"


def benchmark(rule: str, *parts: str) -> str:
    """``logs/benchmarks/<rule>/<parts>.tsv`` (Snakemake's per-job time and memory)."""
    return "/".join([LOGS, "benchmarks", rule, *parts]) + ".tsv"


# --- corpora -------------------------------------------------------------------------------


def synthetic_dir(corpus: str) -> str:
    return f"{RESULTS}/corpora/{corpus}"


def synthetic_manifest(corpus: str, split: str) -> str:
    return f"{synthetic_dir(corpus)}/{split}.jsonl"


def synthetic_audio(corpus: str) -> str:
    return f"{synthetic_dir(corpus)}/audio"


def synthetic_record(corpus: str) -> str:
    return prov(f"{synthetic_dir(corpus)}/corpus")


def imported(corpus: str, split: str) -> str:
    return f"{RESULTS}/data/{corpus}/imported/{split}.jsonl.gz"


def holdout_dir(corpus: str) -> str:
    return f"{RESULTS}/data/{corpus}/holdout"


def validated_dir(corpus: str) -> str:
    return f"{RESULTS}/data/{corpus}/validated"


def validation_report(corpus: str, ext: str = "json") -> str:
    return f"{RESULTS}/data/{corpus}/validation.{ext}"


def filtered(corpus: str, split: str) -> str:
    return f"{RESULTS}/data/{corpus}/filtered/{split}.jsonl.gz"


def shards(corpus: str, split: str) -> str:
    """Lhotse Shar shards of a filtered split (a directory with ``shards.json``)."""
    return f"{RESULTS}/data/{corpus}/shards/{split}"


def filter_report(corpus: str, split: str, ext: str = "json") -> str:
    return f"{RESULTS}/data/{corpus}/filtered/{split}.report.{ext}"


def tokenizer_dir(tokenizer: str) -> str:
    return f"{RESULTS}/tokenizers/{tokenizer}"


def tokenizer_file(tokenizer: str, name: str) -> str:
    """``bpe.model`` (SentencePiece), ``tokens.txt`` (ESPnet token list) or ``summary.json``."""
    return f"{tokenizer_dir(tokenizer)}/{name}"


def recipe_file(recipe: str) -> str:
    """A training recipe: ``config/recipes/<name>.yaml``; ``auto``: the built-in base recipe
    that the run's plan completes (:data:`asrflow.recipe.plan.AUTO_BASE`)."""
    if is_auto(recipe):
        return str(AUTO_BASE)
    return f"config/recipes/{recipe}.yaml"


def plan_file(run: str) -> str:
    """What ``recipe: auto`` derives for a run from its train split (rule plan_run)."""
    return run_file(run, "plan", "plan.json")


def run_dir(run: str) -> str:
    return f"{RESULTS}/runs/{run}"


def run_file(run: str, *parts: str) -> str:
    """A file of a run: ``results/runs/<run>/<parts...>``."""
    return "/".join([run_dir(run), *parts])


def word_lm_file(run: str) -> str:
    """Word counts of a run's train transcripts (``lexicon_lm`` decoding):
    ``results/runs/<run>/lm/word_counts.json``."""
    return run_file(run, "lm", "word_counts.json")


def average_file(run: str, average: str) -> str:
    """Averaged weights of a run: ``results/runs/<run>/average/<monitor>.ave_<k>best.pth``."""
    return run_file(run, "average", f"{average}.pth")


def export_dir(run: str, artifact: str) -> str:
    """An exported model package: ``results/runs/<run>/export/<artifact>/``."""
    return run_file(run, "export", artifact)


def eval_dir(run: str, artifact: str, eval_set: str) -> str:
    """Evaluation of an artifact on an eval set: ``results/runs/<run>/eval/<artifact>/<set>/``."""
    return run_file(run, "eval", artifact, eval_set)


def eval_file(run: str, artifact: str, eval_set: str, name: str) -> str:
    """``summary.json``, ``utterances.csv`` or ``alignments.txt`` of one evaluation."""
    return f"{eval_dir(run, artifact, eval_set)}/{name}"


def selected_file(run: str) -> str:
    """The run's choice on dev: ``results/runs/<run>/selected.json``."""
    return run_file(run, "selected.json")


def selected_package(run: str) -> str:
    """A copy of the package the run's selection chose: ``results/runs/<run>/selected/``, what
    a run with ``init: {run: <run>}`` starts from."""
    return run_file(run, "selected")


def selected_package_files(run: str) -> list[str]:
    """The files of :func:`selected_package` (plain files, so that a copy that comes out
    byte-identical reruns nothing: Snakemake compares their checksums)."""
    return [f"{selected_package(run)}/{name}" for name in PACKAGE_FILES]


def report_file(*parts: str) -> str:
    """The comparison report: ``results/report/<parts...>``."""
    return "/".join([RESULTS, "report", *parts])


def audio_state(corpus: str, split: str) -> str:
    """The audio state of a split's import (:mod:`asrflow.data.audio_state`): an input of the
    import, rewritten when the audio it read has changed since."""
    return f"{RESULTS}/data/{corpus}/audio_state/{split}.json"


def eval_archive() -> str:
    """Every evaluation summary ever written, kept by artifact/data/contract hash (not a
    declared output, so a data revision adds rows to the comparison instead of replacing them)."""
    return f"{RESULTS}/archive/evals"


def shared_decodes() -> str:
    """Decodes kept by what decided them (:mod:`asrflow.evaluate.shared`), so that identical
    weights are decoded once per eval set, contract and decoding settings."""
    return f"{RESULTS}/cache/decodes"


def work_dir(run: str) -> str:
    """A run's working directory: kept across failed or killed jobs (not a declared output)."""
    return f"{RESULTS}/work/{run}"
