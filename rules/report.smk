# Reporting: learning curves, per-slice plots, the comparison over every run (current results
# and the eval archive's earlier revisions) and the forest plot of its WER differences.


rule plot_learning_curves:
    input:
        artifacts=layout.run_file("{run}", "train", "artifacts"),
    output:
        figure=report(
            layout.report_file("plots", "{run}", "learning_curves.png"),
            caption="../report/learning_curves.rst",
            category="Training",
            subcategory="{run}",
        ),
        record=layout.prov(layout.report_file("plots", "{run}", "learning_curves.png")),
    log:
        layout.log("plot_learning_curves", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    script:
        "../scripts/plot_learning_curves.py"


rule plot_slices:
    input:
        evaluations=slice_evaluations,
    output:
        figure=report(
            layout.report_file("plots", "{run}", "{eval_set}.slices.png"),
            caption="../report/slices.rst",
            category="Evaluation",
            subcategory="{run}",
        ),
        record=layout.prov(
            layout.report_file("plots", "{run}", "{eval_set}.slices.png")
        ),
    log:
        layout.log("plot_slices", "{run}", "{eval_set}"),
    conda:
        "../envs/asrflow.yaml"
    script:
        "../scripts/plot_slices.py"


rule report:
    input:
        unpack(report_inputs),
    output:
        csv=layout.report_file("comparison.csv"),
        markdown=layout.report_file("comparison.md"),
        html=report(
            layout.report_file("comparison.html"),
            caption="../report/comparison.rst",
            category="Comparison",
        ),
        replicas=layout.report_file("replicas.csv"),
        record=layout.prov(layout.report_file("comparison.csv")),
    log:
        layout.log("report", "comparison"),
    benchmark:
        layout.benchmark("report", "comparison")
    conda:
        "../envs/asrflow.yaml"
    params:
        archive=layout.eval_archive(),
        baseline_run=config["report"]["baseline_run"],
        replicas=replica_runs(config),
    script:
        "../scripts/report.py"


rule plot_differences:
    input:
        comparison=settled_comparison,
    output:
        figure=report(
            layout.report_file("plots", "differences.png"),
            caption="../report/differences.rst",
            category="Comparison",
        ),
        record=layout.prov(layout.report_file("plots", "differences.png")),
    log:
        layout.log("plot_differences", "comparison"),
    conda:
        "../envs/asrflow.yaml"
    script:
        "../scripts/plot_differences.py"
