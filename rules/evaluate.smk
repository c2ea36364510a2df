# Judging the exported artifacts: each artifact on each eval set in a fresh process (bf16 weights,
# no autocast), the choice on dev, and the comparison report over every run.


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        summary=layout.eval_file("{run}", "{artifact}", "{eval_set}", "summary.json"),
        utterances=layout.eval_file(
            "{run}", "{artifact}", "{eval_set}", "utterances.csv"
        ),
        alignments=layout.eval_file(
            "{run}", "{artifact}", "{eval_set}", "alignments.txt"
        ),
        record=layout.prov(
            layout.eval_file("{run}", "{artifact}", "{eval_set}", "summary.json")
        ),
    log:
        layout.log("evaluate", "{run}", "{artifact}", "{eval_set}"),
    conda:
        "../envs/asrflow.yaml"
    threads: eval_threads
    resources:
        gpu=config["evaluation"]["resources"]["devices"],
        cpus_per_gpu=config["evaluation"]["resources"]["cpus_per_device"],
        mem_mb=config["evaluation"]["resources"]["mem_mb"],
        runtime=lambda wildcards, attempt: config["evaluation"]["resources"]["runtime"]
        * attempt,
    params:
        evaluation=layout.eval_params(config),
        slice_fields=eval_slice_fields,
        archive=layout.eval_archive(),
        decodes=layout.shared_decodes(),
    script:
        "../scripts/evaluate.py"


rule word_lm:
    input:
        train=run_train_splits,
    output:
        counts=layout.word_lm_file("{run}"),
        record=layout.prov(layout.word_lm_file("{run}")),
    log:
        layout.log("word_lm", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    params:
        normalization=config["text_normalization"],
    script:
        "../scripts/word_lm.py"


rule select_model:
    input:
        evaluations=dev_evaluations,
    output:
        selected=layout.selected_file("{run}"),
        record=layout.prov(layout.selected_file("{run}")),
    log:
        layout.log("select_model", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    params:
        dev_set=lambda wildcards: layout.dev_set(config, wildcards.run),
    script:
        "../scripts/select_model.py"


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
        record=layout.prov(layout.report_file("plots", "{run}", "{eval_set}.slices.png")),
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
        record=layout.prov(layout.report_file("comparison.csv")),
    log:
        layout.log("report", "comparison"),
    conda:
        "../envs/asrflow.yaml"
    params:
        archive=layout.eval_archive(),
    script:
        "../scripts/report.py"
