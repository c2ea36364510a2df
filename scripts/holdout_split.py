"""Snakemake adapter of checkpoint holdout_split -> asrflow.data.stages.holdout_split."""

from asrflow.data.stages import holdout_split
from asrflow.workflow import step

with step(snakemake):
    holdout_split(snakemake.input.cuts, snakemake.output.splits, snakemake.params.holdout)
