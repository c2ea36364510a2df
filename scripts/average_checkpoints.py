"""Snakemake adapter of rule average_checkpoints -> asrflow.select.stages.average_run."""

from asrflow.select.stages import average_run
from asrflow.workflow import step

with step(snakemake) as s:
    monitor, k = snakemake.params.criterion
    averaged = average_run(
        snakemake.input.summary, snakemake.input.artifacts, monitor, k, snakemake.output.weights
    )
    s.add_extra_inputs("checkpoints", [c["path"] for c in averaged["inputs"]])
    s.add_details("averaged", averaged["inputs"])
