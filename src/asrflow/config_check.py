"""The checks of a config that its JSON schema cannot express: cross references (a run's
corpora, tokenizer and dev corpus, a tokenizer's corpus, the report's baseline run, extra eval
sets) and the splits they need. ``rules/common.smk`` runs them once the config is complete
(defaults filled, replicas expanded, ``init.run`` resolved), so a bad one stops before the DAG
is built, with one line naming the key.
"""

from __future__ import annotations

from asrflow.errors import AsrflowError
from asrflow.project import INIT_TOKENIZER, Config, eval_set_split, run_dev_corpus, splits


def check_config(config: Config) -> None:
    """Checks the JSON schema cannot express: cross references and train splits."""
    trained_on = {c for r in config.get("runs", {}).values() for c in r["corpora"]}
    trained_on |= {t["corpus"] for t in config.get("tokenizers", {}).values()}
    for name in config["corpora"]:
        if name in trained_on and "train" not in splits(config, name):
            raise AsrflowError(
                f"corpora.{name}: a split named 'train' is required to train a tokenizer or a "
                f"run on it (got {', '.join(splits(config, name))})"
            )
    for eval_set in config.get("evaluation", {}).get("extra_sets", []):
        eval_set_split(config, eval_set)
    for name, r in config.get("runs", {}).items():
        if r["tokenizer"] == INIT_TOKENIZER:
            if not r.get("init"):
                raise AsrflowError(
                    f"runs.{name}.tokenizer: init takes the starting model's tokenizer, and the "
                    "run has no init; name a tokenizer or add runs.<run>.init"
                )
        elif r["tokenizer"] not in config.get("tokenizers", {}):
            raise AsrflowError(f"runs.{name}.tokenizer: unknown tokenizer {r['tokenizer']!r}")
        for corpus_name in [*r["corpora"], run_dev_corpus(config, name)]:
            if corpus_name not in config["corpora"]:
                raise AsrflowError(f"runs.{name}: unknown corpus {corpus_name!r}")
        if "dev" not in splits(config, run_dev_corpus(config, name)):
            raise AsrflowError(
                f"runs.{name}: corpus {run_dev_corpus(config, name)!r} has no dev split to "
                "validate on; add one or name another corpus in runs.<run>.dev"
            )
        if r.get("weights") is not None and len(r["weights"]) != len(r["corpora"]):
            raise AsrflowError(f"runs.{name}.weights: one weight per corpus in runs.{name}.corpora")
    for name, tok in config.get("tokenizers", {}).items():
        if tok["corpus"] not in config["corpora"]:
            raise AsrflowError(
                f"tokenizers.{name}.corpus: unknown corpus {tok['corpus']!r}; "
                f"choose one of {', '.join(config['corpora'])}"
            )
    baseline = (config.get("report") or {}).get("baseline_run")
    if baseline is not None and baseline not in config.get("runs", {}):
        raise AsrflowError(
            f"report.baseline_run: unknown run {baseline!r}; "
            f"choose one of {', '.join(config.get('runs', {})) or '(no runs configured)'}"
        )
