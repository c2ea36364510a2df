"""Snakemake adapter of rule train_tokenizer -> asrflow.tokenizer.train_tokenizer."""

from asrflow.io import write_json
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig, train_tokenizer
from asrflow.workflow import step

with step(snakemake):
    summary = train_tokenizer(
        snakemake.input.cuts,
        snakemake.output.model,
        snakemake.output.tokens,
        TokenizerConfig.from_dict(snakemake.params.tokenizer),
        TextNormalization.from_dict(snakemake.params.normalization),
        name=snakemake.wildcards.tokenizer,
    )
    write_json(snakemake.output.summary, summary)
