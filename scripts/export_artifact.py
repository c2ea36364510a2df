"""Snakemake adapter of rule export_artifact -> asrflow.select.stages.export_run_artifact
(export_baseline for a fine-tuning run's start weights)."""

from asrflow.artifacts import BASELINE
from asrflow.select.stages import export_baseline, export_run_artifact
from asrflow.workflow import step

with step(snakemake):
    if snakemake.wildcards.artifact == BASELINE:
        export_baseline(snakemake.params.init_model, snakemake.output.package)
    else:
        export_run_artifact(
            snakemake.wildcards.artifact,
            summary=snakemake.input.summary,
            artifacts=snakemake.input.artifacts,
            bpe_model=snakemake.input.bpe_model,
            tokens=snakemake.input.tokens,
            out_dir=snakemake.output.package,
            averaged=snakemake.input.get("averaged"),
            init_weights=snakemake.input.get("init_weights"),
        )
