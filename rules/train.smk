# Training: the plan of a run with recipe: auto, the batch audit and smoke run first, then the
# long job (resumable from its work dir).


# What recipe: auto derives from the run's train split, each value with its reason (asrflow plan).
rule plan_run:
    input:
        unpack(run_plan_cuts),
    output:
        plan=layout.plan_file("{run}"),
        record=layout.prov(layout.plan_file("{run}")),
    log:
        layout.log("plan_run", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    params:
        plan=lambda w: runs.plan_params(config, w.run),
        rules_version=RULES_VERSION,
        normalization=config["text_normalization"],
    script:
        "../scripts/plan_run.py"


rule audit_batches:
    input:
        unpack(run_audit_inputs),
        unpack(run_plan),
    output:
        report=layout.run_file("{run}", "audit", "batches.json"),
        text=layout.run_file("{run}", "audit", "batches.txt"),
        figure=report(
            layout.run_file("{run}", "audit", "batches.png"),
            caption="../report/audit.rst",
            category="Training",
        ),
        record=layout.prov(layout.run_file("{run}", "audit", "batches.json")),
    log:
        layout.log("audit_batches", "{run}"),
    benchmark:
        layout.benchmark("audit_batches", "{run}")
    conda:
        "../envs/asrflow.yaml"
    params:
        recipe=audit_recipe,
        normalization=config["text_normalization"],
        weights=lookup(dpath="runs/{run}/weights", within=config),
    script:
        "../scripts/audit_batches.py"


rule smoke_train:
    input:
        unpack(run_train_inputs),
        unpack(run_init_weights),
        unpack(run_plan),
    output:
        summary=layout.run_file("{run}", "smoke", "summary.json"),
        record=layout.prov(layout.run_file("{run}", "smoke", "summary.json")),
    log:
        layout.log("smoke_train", "{run}"),
    benchmark:
        layout.benchmark("smoke_train", "{run}")
    conda:
        "../envs/asrflow.yaml"
    threads: 2
    params:
        recipe=smoke_recipe,
        smoke=config["smoke"],
        init=lookup(dpath="runs/{run}/init", within=config, default=None),
        normalization=config["text_normalization"],
        work=layout.run_file("{run}", "smoke", "work"),
    script:
        "../scripts/smoke_train.py"


# A checkpoint, because a run can end as a failed *result* (diverged, out of memory): its summary
# then says so and the report lists it without evaluations (rules/common.smk: run_completed).
checkpoint train:
    input:
        unpack(run_train_inputs),
        unpack(run_init_weights),
        unpack(run_plan),
        smoke=layout.run_file("{run}", "smoke", "summary.json"),
        audit=layout.run_file("{run}", "audit", "batches.json"),
    output:
        run=directory(layout.run_file("{run}", "train", "artifacts")),
        summary=layout.run_file("{run}", "train", "summary.json"),
        record=layout.prov(layout.run_file("{run}", "train", "summary.json")),
    log:
        layout.log("train", "{run}"),
    benchmark:
        layout.benchmark("train", "{run}")
    conda:
        "../envs/asrflow.yaml"
    threads: run_threads
    # One task in which Lightning starts the ranks of its node; or, on several nodes (launcher
    # srun), an MPI-style job whose script starts one srun task per device (asrflow.train.run.launch).
    resources:
        gpu=run_slurm("gpu"),
        cpus_per_gpu=run_slurm("cpus_per_gpu"),
        mem_mb=lookup(dpath="runs/{run}/resources/mem_mb", within=config),
        runtime=run_runtime,
        nodes=run_slurm("nodes"),
        mpi=run_slurm("mpi"),
        tasks_per_node=run_slurm("tasks_per_node"),
        tasks=run_slurm("tasks"),
        tasks_per_gpu=run_slurm("tasks_per_gpu"),
        cpus_per_task=run_slurm("cpus_per_task"),
    params:
        recipe=run_recipe,
        weights=lookup(dpath="runs/{run}/weights", within=config),
        init=lookup(dpath="runs/{run}/init", within=config, default=None),
        normalization=config["text_normalization"],
        work=layout.work_dir("{run}"),
    script:
        "../scripts/train.py"
