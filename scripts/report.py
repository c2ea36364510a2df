"""Snakemake adapter of rule report -> asrflow.report.stages.build_report."""

from asrflow.evaluate.archive import archive_files
from asrflow.report.stages import build_report
from asrflow.workflow import step

with step(snakemake) as s:
    # the eval archive is read beside the declared inputs: its files go on record
    s.add_extra_inputs("archive", archive_files(snakemake.params.archive))
    build_report(
        train_summaries=snakemake.input.train,
        evaluations=snakemake.input.evaluations,
        utterances=snakemake.input.utterances,
        selections=snakemake.input.selected,
        archive_dir=snakemake.params.archive,
        csv_path=snakemake.output.csv,
        md_path=snakemake.output.markdown,
        html_path=snakemake.output.html,
        # report.baseline_run (null: the first configured run)
        baseline_run=snakemake.params.get("baseline_run"),
        # runs.<run>.seeds: which runs are replicas of which (asrflow.replicas.replica_runs)
        replicas=snakemake.params.get("replicas"),
        replicas_path=snakemake.output.replicas,
        # inlined into comparison.html: learning curves, slice plots and batch audits
        plots=[*snakemake.input.plots, *snakemake.input.audits],
    )
