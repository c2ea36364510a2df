# Choosing the model: on dev only, among a run's evaluated artifacts (selection.* in the config).


rule select_model:
    input:
        evaluations=dev_evaluations,
        utterances=dev_utterances,
        # group values (speaker, session) of train, dev and test: does dev measure new speakers?
        validation=run_validation_reports,
    output:
        selected=layout.selected_file("{run}"),
        record=layout.prov(layout.selected_file("{run}")),
    log:
        layout.log("select_model", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    params:
        dev_set=run_dev_set,
        require_significant=config["selection"]["require_significant"],
        train_corpora=run_train_corpora,
        test_sets=run_held_out_test_sets,
    script:
        "../scripts/select_model.py"


# What a run with init: {run: <run>} starts from: a copy of the chosen package, as plain files
# (asrflow.select.publish), so that a selection that comes out the same retrains no child. A
# checkpoint, so that this holds within one invocation too: Snakemake plans every job below a
# job it will run, and re-plans only after a checkpoint; a package republished with the same
# bytes keeps its mtimes, and the re-plan drops the children's jobs.
checkpoint publish_selected:
    input:
        selected=layout.selected_file("{run}"),
        packages=run_exports,
    output:
        package=layout.selected_package_files("{run}"),
        record=layout.prov(layout.selected_package("{run}")),
    log:
        layout.log("publish_selected", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    script:
        "../scripts/publish_selected.py"
