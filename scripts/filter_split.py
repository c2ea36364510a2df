"""Snakemake adapter of rule filter_split -> asrflow.data.stages.filter_split."""

from asrflow.data.stages import filter_split
from asrflow.workflow import step

with step(snakemake):
    filter_split(
        snakemake.input.cuts,
        snakemake.output.cuts,
        snakemake.output.report,
        snakemake.output.text,
        filter=snakemake.params.filter,
        slice_fields=snakemake.params.slice_fields,
        normalization=snakemake.params.normalization,
        name=f"{snakemake.wildcards.corpus}/{snakemake.wildcards.split}",
    )
