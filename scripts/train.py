"""Snakemake adapter of rule train -> asrflow.train.runner.train_run."""

from asrflow.train.runner import spec_from_inputs, train_run
from asrflow.workflow import step

with step(snakemake):
    spec = spec_from_inputs(
        snakemake.wildcards.run,
        dict(snakemake.input.items()),
        normalization=snakemake.params.normalization,
        overrides=snakemake.params.overrides,
        weights=snakemake.params.weights,
        init=snakemake.params.init,
    )
    train_run(
        spec,
        snakemake.params.work,
        snakemake.output.run,
        snakemake.output.summary,
        threads=snakemake.threads,
    )
