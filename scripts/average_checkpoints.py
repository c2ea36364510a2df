"""Snakemake adapter of rule average_checkpoints -> asrflow.select.stages.average_run."""

from asrflow.select.stages import average_run
from asrflow.workflow import step

with step(snakemake):
    monitor, k = snakemake.params.criterion
    average_run(
        snakemake.input.summary, snakemake.input.artifacts, monitor, k, snakemake.output.weights
    )
