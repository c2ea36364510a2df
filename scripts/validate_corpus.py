"""Snakemake adapter of checkpoint validate_corpus -> asrflow.data.stages.validate_corpus."""

from asrflow import project
from asrflow.data.stages import validate_corpus
from asrflow.workflow import step

with step(snakemake) as s:
    audio = validate_corpus(
        snakemake.wildcards.corpus,
        dict(snakemake.input.items()),
        snakemake.output.cuts,
        snakemake.output.report,
        snakemake.output.text,
        validation=snakemake.params.validation,
        normalization=snakemake.params.normalization,
        threads=snakemake.threads,
        sampling_rate=snakemake.params.sampling_rate,
        model_rates=snakemake.params.model_rates,
        manifests=project.split_sources(snakemake.config, snakemake.wildcards.corpus),
    )
    s.add_extra_inputs("audio", audio)
