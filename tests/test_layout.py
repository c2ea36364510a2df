"""Tests for asrflow.layout: where every artifact lives (paths of names, no config read)."""

from __future__ import annotations

from asrflow import layout

# --- paths -----------------------------------------------------------------------------------


def test_templates_keep_wildcards() -> None:
    assert layout.imported("{corpus}", "{split}") == (
        "results/data/{corpus}/imported/{split}.jsonl.gz"
    )
    assert layout.filtered("{corpus}", "{split}") == (
        "results/data/{corpus}/filtered/{split}.jsonl.gz"
    )
    assert layout.filter_report("{corpus}", "{split}", "txt") == (
        "results/data/{corpus}/filtered/{split}.report.txt"
    )
    assert layout.filter_report("{corpus}", "{split}") == (
        "results/data/{corpus}/filtered/{split}.report.json"
    )
    assert layout.validated_dir("{corpus}") == "results/data/{corpus}/validated"
    assert layout.validation_report("{corpus}") == "results/data/{corpus}/validation.json"
    assert layout.validation_report("{corpus}", "txt") == "results/data/{corpus}/validation.txt"
    assert layout.holdout_dir("{corpus}") == "results/data/{corpus}/holdout"
    assert layout.synthetic_manifest("{corpus}", "train") == "results/corpora/{corpus}/train.jsonl"
    assert layout.synthetic_audio("{corpus}") == "results/corpora/{corpus}/audio"
    assert layout.synthetic_record("{corpus}") == "results/corpora/{corpus}/corpus.prov.json"
    assert layout.tokenizer_file("{tokenizer}", "tokens.txt") == (
        "results/tokenizers/{tokenizer}/tokens.txt"
    )
    assert layout.tokenizer_dir("{tokenizer}") == "results/tokenizers/{tokenizer}"


def test_concrete_paths_and_helpers() -> None:
    assert layout.imported("demo", layout.ALL) == "results/data/demo/imported/all.jsonl.gz"
    assert layout.prov(layout.imported("demo", "dev")) == (
        "results/data/demo/imported/dev.jsonl.gz.prov.json"
    )
    assert layout.log("filter_split", "{corpus}", "{split}") == (
        "logs/filter_split/{corpus}/{split}.log"
    )
    assert layout.log("synthesize_corpus", "demo") == "logs/synthesize_corpus/demo.log"
    assert layout.benchmark("validate_corpus", "demo") == (
        "logs/benchmarks/validate_corpus/demo.tsv"
    )


def test_every_result_path_is_under_results() -> None:
    paths = [
        layout.imported("c", "s"),
        layout.filtered("c", "s"),
        layout.filter_report("c", "s"),
        layout.validated_dir("c"),
        layout.validation_report("c"),
        layout.holdout_dir("c"),
        layout.synthetic_manifest("c", "s"),
        layout.synthetic_audio("c"),
        layout.synthetic_record("c"),
        layout.tokenizer_file("t", "bpe.model"),
    ]
    assert all(p.startswith("results/") for p in paths)
    assert len(set(paths)) == len(paths)


def test_artifacts_of_different_corpora_and_splits_do_not_collide() -> None:
    names = [("a", "train"), ("a", "dev"), ("b", "train"), ("a_b", "train")]
    for fn in (layout.imported, layout.filtered, layout.filter_report):
        paths = [fn(c, s) for c, s in names]
        assert len(set(paths)) == len(paths)
