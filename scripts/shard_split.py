"""Snakemake adapter of rule shard_split -> asrflow.data.stages.shard_split."""

from asrflow.data.stages import shard_split
from asrflow.workflow import step

with step(snakemake):
    shard_split(snakemake.input.cuts, snakemake.output.shards, snakemake.params.shards)
