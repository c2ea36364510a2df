"""Snakemake adapter of rule synthesize_corpus -> asrflow.corpus.synthetic.generate_corpus."""

from pathlib import Path

from asrflow.corpus.plan import SyntheticCorpusConfig
from asrflow.corpus.synthetic import generate_corpus
from asrflow.workflow import step

with step(snakemake):
    generate_corpus(
        Path(snakemake.output.train).parent, SyntheticCorpusConfig(**snakemake.params.synthetic)
    )
