"""Snakemake adapter of rule import_manifest -> asrflow.data.stages.import_split."""

from asrflow.data.stages import import_split
from asrflow.workflow import step

with step(snakemake) as s:
    audio = import_split(
        snakemake.params.format,
        snakemake.input.manifest,
        snakemake.output.cuts,
        sampling_rate=snakemake.params.sampling_rate,
        threads=snakemake.threads,
    )
    s.add_extra_inputs("audio", audio)
