"""Snakemake adapter of rule init_tokenizer -> asrflow.export.package_tokenizer."""

from pathlib import Path

from asrflow.export.package_tokenizer import take_package_tokenizer
from asrflow.io import write_json
from asrflow.text import TextNormalization
from asrflow.workflow import step

with step(snakemake):
    model = Path(snakemake.input.model)
    splits = {k: v for k, v in snakemake.input.items() if k != "model"}
    summary = take_package_tokenizer(
        model.parent if model.name == "config.yaml" else model,
        snakemake.output.model,
        snakemake.output.tokens,
        splits,
        TextNormalization.from_dict(snakemake.params.normalization),
    )
    write_json(snakemake.output.summary, summary)
