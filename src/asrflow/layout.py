"""Where every artifact lives, and what the config says about corpora and splits.

One place for result paths, so that rules, scripts and tests agree. Functions return path
*templates* when given wildcard strings (``imported("{corpus}", "{split}")``) and concrete paths
when given names. Everything the workflow writes is under ``results/``, logs under ``logs/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asrflow.errors import AsrflowError

RESULTS = "results"
LOGS = "logs"
SYNTHETIC_SPLITS = ("train", "dev", "test")
ALL = "all"
"""Pseudo split name of a holdout corpus's single manifest before it is split."""

Config = Mapping[str, Any]


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


def filter_report(corpus: str, split: str, ext: str = "json") -> str:
    return f"{RESULTS}/data/{corpus}/filtered/{split}.report.{ext}"


def tokenizer_dir(tokenizer: str) -> str:
    return f"{RESULTS}/tokenizers/{tokenizer}"


def tokenizer_file(tokenizer: str, name: str) -> str:
    """``bpe.model`` (SentencePiece), ``tokens.txt`` (ESPnet token list) or ``summary.json``."""
    return f"{tokenizer_dir(tokenizer)}/{name}"


# --- what the config says ------------------------------------------------------------------


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
        names = ["train", *c["holdout"].get("fractions", {"dev": 0.1, "test": 0.1})]
    else:
        names = list(c["manifests"])
    return sorted(names, key=lambda s: (s != "train", s))


def import_parts(config: Config, name: str) -> list[str]:
    """What the import rule is run on: every split, or ``all`` for a holdout corpus."""
    return [ALL] if uses_holdout(config, name) else splits(config, name)


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


def check_config(config: Config) -> None:
    """Checks the JSON schema cannot express: cross references and a train split."""
    for name in config["corpora"]:
        if "train" not in splits(config, name):
            raise AsrflowError(
                f"corpora.{name}.manifests: a split named 'train' is required "
                f"(got {', '.join(splits(config, name))})"
            )
    for name, tok in config.get("tokenizers", {}).items():
        if tok["corpus"] not in config["corpora"]:
            raise AsrflowError(
                f"tokenizers.{name}.corpus: unknown corpus {tok['corpus']!r}; "
                f"choose one of {', '.join(config['corpora'])}"
            )


def all_targets(config: Config) -> list[str]:
    """The default targets: validated and filtered corpora, trained tokenizers."""
    targets: list[str] = []
    for name in config["corpora"]:
        targets.append(validation_report(name, "txt"))
        targets += [filtered(name, s) for s in splits(config, name)]
    for name in config.get("tokenizers", {}):
        targets.append(tokenizer_file(name, "tokens.txt"))
    return targets
