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
