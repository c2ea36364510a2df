"""Snakemake adapter of rule train -> asrflow.train.run.runner.train_run, in this process (Lightning
starts any other ranks) or on one srun task per device (asrflow.train.run.launch.srun_train)."""

from asrflow.train.run.launch import SrunLaunch, srun_train
from asrflow.train.run.runner import train_run
from asrflow.train.spec import spec_from_inputs
from asrflow.workflow import step

with step(snakemake):
    spec = spec_from_inputs(
        snakemake.wildcards.run,
        dict(snakemake.input.items()),
        normalization=snakemake.params.normalization,
        recipe=snakemake.params.recipe,
        weights=snakemake.params.weights,
        init=snakemake.params.init,
    )
    args = (spec, snakemake.params.work, snakemake.output.run, snakemake.output.summary)
    launch = SrunLaunch.from_job(dict(snakemake.resources.items()))
    if launch is None:
        train_run(*args, threads=snakemake.threads)
    else:
        srun_train(launch, *args, threads=snakemake.threads, log_path=snakemake.log[0])
