"""Snakemake adapter of rule word_lm -> asrflow.evaluate.word_lm.build_word_counts."""

from asrflow.evaluate.word_lm import build_word_counts
from asrflow.workflow import step

with step(snakemake):
    build_word_counts(
        list(snakemake.input.train),
        snakemake.params.normalization,
        snakemake.output.counts,
        dev_cuts=list(snakemake.input.dev),
    )
