"""Snakemake adapter of rule smoke_train -> asrflow.train.preflight.smoke.smoke_run."""

from asrflow.train.preflight.smoke import smoke_run
from asrflow.train.spec import spec_from_inputs
from asrflow.workflow import step

with step(snakemake):
    spec = spec_from_inputs(
        snakemake.wildcards.run,
        dict(snakemake.input.items()),
        normalization=snakemake.params.normalization,
        recipe=snakemake.params.recipe,
        max_train_cuts=snakemake.params.smoke["max_train_cuts"],
        max_dev_cuts=snakemake.params.smoke["max_dev_cuts"],
        init=snakemake.params.init,
    )
    smoke_run(spec, snakemake.params.work, snakemake.output.summary)
