"""Snakemake adapter of rule export_artifact -> asrflow.select.stages.export_run_artifact."""

from asrflow.select.stages import export_run_artifact
from asrflow.workflow import step

with step(snakemake):
    export_run_artifact(
        snakemake.wildcards.artifact,
        summary=snakemake.input.summary,
        artifacts=snakemake.input.artifacts,
        bpe_model=snakemake.input.bpe_model,
        tokens=snakemake.input.tokens,
        out_dir=snakemake.output.package,
        averaged=snakemake.input.get("averaged"),
    )
