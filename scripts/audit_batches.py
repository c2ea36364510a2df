"""Snakemake adapter of rule audit_batches -> asrflow.train.preflight.audit.audit_run."""

from asrflow.train.preflight.audit import audit_run
from asrflow.train.spec import spec_from_inputs
from asrflow.workflow import step

with step(snakemake):
    spec = spec_from_inputs(
        snakemake.wildcards.run,
        dict(snakemake.input.items()),
        normalization=snakemake.params.normalization,
        recipe=snakemake.params.recipe,
        weights=snakemake.params.weights,
    )
    audit_run(spec, snakemake.output.report, snakemake.output.figure, snakemake.output.text)
