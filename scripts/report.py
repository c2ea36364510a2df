"""Snakemake adapter of rule report -> asrflow.report.stages.build_report."""

from asrflow.report.stages import build_report
from asrflow.workflow import step

with step(snakemake):
    build_report(
        train_summaries=snakemake.input.train,
        evaluations=snakemake.input.evaluations,
        selections=snakemake.input.selected,
        archive_dir=snakemake.params.archive,
        csv_path=snakemake.output.csv,
        md_path=snakemake.output.markdown,
        html_path=snakemake.output.html,
    )
