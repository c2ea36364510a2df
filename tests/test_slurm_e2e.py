"""The tiny demo DAG through a real SLURM with profiles/slurm (marked slow).

Needs a SLURM cluster with fake or real GPUs: CI starts a single-node one with
`.ci/slurm-cluster.sh` (FAKE_GPUS=2). The test submits only to that cluster (ClusterName
asrflowci) unless ASRFLOW_SLURM_TEST=1 says that submitting to the cluster at hand is fine, and
skips, saying why, where there is no SLURM at all.

The run has two seed replicas (``seeds: [0, 1]``, issue 14 section 3), whose train jobs must run
side by side as two SLURM jobs. The targets are one evaluation of the first replica (artifact
"last" on the dev split), which pulls in every stage that runs on the cluster: data preparation,
tokenizer, audit, smoke run, train, export and evaluate, and the second replica's training;
selection and the report are light rules for the login node. Every job is a SLURM job
with two Snakemake start-ups of ~10-20 s on a 2-core machine, so the whole DAG would take far
longer without testing anything more.

It checks that every job that is not a local rule ran as a SLURM job of its own (the job IDs in
the provenance records are the ones the executor submitted), that train and evaluate asked for
their GPU through the profile (`--gpus=a100:1` on the partition "gpu") and got one (a fake one
here: they must fall back to the CPU), and that the artifacts verify.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from asrflow.cli import main as asrflow_main
from tests.e2e import REPO, SNAKEMAKE, environment, write_config
from tests.tiny_dag import CONFIG as TRAINING_CONFIG
from tests.tiny_dag import TINY_RECIPE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("the_slurm_cluster_alone")]

TEST_CLUSTER = "asrflowci"
"""ClusterName of the cluster .ci/slurm-cluster.sh starts."""
OPT_IN = "ASRFLOW_SLURM_TEST"
TIMEOUT_S = 900
"""The whole run, SLURM queueing included, is stopped (and its jobs cancelled) after this."""


def _slurm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


def slurm_unavailable() -> str | None:
    """Why the test cannot run here, or None if it can."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "SLURM is not installed (no sinfo/sbatch); CI starts one with .ci/slurm-cluster.sh"
    try:
        info = _slurm("sinfo", "-h", "-o", "%P %t %G")
        config = _slurm("scontrol", "show", "config")
    except subprocess.TimeoutExpired:
        return "the SLURM controller does not answer (sinfo timed out)"
    if info.returncode != 0 or config.returncode != 0:
        return f"the SLURM controller does not answer: {(info.stderr or config.stderr).strip()}"
    cluster = re.search(r"^ClusterName\s*=\s*(\S+)", config.stdout, re.M)
    name = cluster.group(1) if cluster else None
    if name != TEST_CLUSTER and os.environ.get(OPT_IN) != "1":
        return (
            f"SLURM cluster {name!r} is not the local test cluster ({TEST_CLUSTER}, started by "
            f".ci/slurm-cluster.sh); set {OPT_IN}=1 to submit the tiny DAG to it"
        )
    rows = [line.split() for line in info.stdout.splitlines() if line.strip()]
    partitions = {row[0].rstrip("*") for row in rows if row[1] in ("idle", "mix", "alloc")}
    if "gpu" not in partitions or not any("gpu" in row[2] for row in rows if len(row) > 2):
        return f"no usable partition 'gpu' with GPU GRES (sinfo: {info.stdout.strip()!r})"
    return None


RUN = "tiny_ctc"
REPLICAS = [f"{RUN}-seed0", f"{RUN}-seed1"]
"""The runs of the replicated config (replica_config): what test_slurm_run trains."""
TARGET = f"results/runs/{REPLICAS[0]}/eval/last/tiny.dev/summary.json"
TARGETS = [TARGET, f"results/runs/{REPLICAS[1]}/train/summary.json"]
GPU_JOB = {"devices": 1, "cpus_per_device": 1, "mem_mb": 2000, "runtime": 15}


def tiny_config() -> dict:
    """The training e2e config, with one GPU for train and for evaluate."""
    config = json.loads(json.dumps(TRAINING_CONFIG))
    config["runs"][RUN]["resources"] = dict(GPU_JOB)
    config["evaluation"] = {"resources": dict(GPU_JOB)}
    return config


def replica_config() -> dict:
    """tiny_config with two seed replicas of its run."""
    config = tiny_config()
    config["runs"][RUN]["seeds"] = [0, 1]
    return config


def tiny_recipe() -> dict:
    recipe = json.loads(json.dumps(TINY_RECIPE))
    recipe["trainer"].update(max_steps=8, val_check_interval=4)
    recipe["best_model_criterion"] = [["valid/loss", 2, "min"]]
    return recipe


def slurm_command(prefix: str, *targets: str) -> list[str]:
    """The README's cluster command, plus the test-only overrides of sizes and polling; the
    targets (default TARGET) come last."""
    return [
        "timeout", "-k", "60", str(TIMEOUT_S),
        *SNAKEMAKE,
        "--snakefile", str(REPO / "Snakefile"),
        "--configfile", "config.yaml",
        "--profile", str(REPO / "profiles/slurm"),
        "--workflow-profile", "none",
        # test-only: a 2-core node with little memory, jobs of seconds, jobs findable by name
        "--max-threads", "1",
        "--default-resources", "mem_mb=1000", "runtime=10*attempt",
        "--retries", "0",
        "--slurm-init-seconds-before-status-checks", "2",
        "--seconds-between-status-checks", "2",
        "--slurm-jobname-prefix", prefix,
        "--slurm-keep-successful-logs",
        "--verbose",
        *(targets or [TARGET]),
    ]  # fmt: skip


def cancel_leftovers(prefix: str) -> None:
    """scancel the jobs of this test that are still queued or running (after a timeout)."""
    listing = _slurm("squeue", "-h", "-o", "%i %j")
    ids = [i for i, name in (line.split() for line in listing.stdout.splitlines()) if
           name.startswith(prefix + "_")]  # fmt: skip
    if ids:
        _slurm("scancel", *ids)


def submitted_jobs(log: str) -> dict[str, dict]:
    """Snakemake job ID -> {rule, local, outputs, slurm_id, sbatch} from a --verbose run log."""
    jobs: dict[str, dict] = {}
    current: dict | None = None
    for line in log.splitlines():
        if m := re.match(r"^(local)?(?:rule|checkpoint) (\w+):$", line.strip()):
            current = {"rule": m.group(2), "local": bool(m.group(1)), "outputs": []}
        elif current is not None and (m := re.match(r"^\s+output: (.*)$", line)):
            current["outputs"] = [p.strip() for p in m.group(1).split(",")]
        elif current is not None and (m := re.match(r"^\s+jobid: (\d+)$", line)):
            jobs[m.group(1)] = current
            current = None
    # sbatch --output <slurm_logs>/rule_<rule>/<wildcards>/%j.log names the job's log directory
    sbatch = {
        m.group(1): m.group(0) for m in re.finditer(r"sbatch .*--output '?(\S+?)/%j\.log.*", log)
    }
    submitted = r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+)/\d+\.log\)"
    for m in re.finditer(submitted, log):
        jobs[m.group(1)].update(slurm_id=m.group(2), sbatch=sbatch.get(m.group(3), ""))
    return jobs


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    if reason := slurm_unavailable():
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("slurm")
    write_config(workdir, replica_config())
    (workdir / "config/recipes").mkdir(parents=True, exist_ok=True)
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(tiny_recipe()))
    prefix = f"asrflowtest_{uuid.uuid4().hex[:8]}"
    try:
        proc = subprocess.run(
            slurm_command(prefix, *TARGETS),
            cwd=workdir,
            capture_output=True,
            text=True,
            env=environment(),
            timeout=TIMEOUT_S + 120,
        )
    finally:
        cancel_leftovers(prefix)
    log = proc.stdout + proc.stderr
    (workdir / "snakemake.log").write_text(log)
    if proc.returncode != 0:
        slurm_logs = sorted((workdir / ".snakemake/slurm_logs").rglob("*.log"))
        tails = "\n".join(f"== {p}\n{p.read_text()[-3000:]}" for p in slurm_logs[-4:])
        timed_out = " (timed out)" if proc.returncode in (124, 137) else ""
        pytest.fail(
            f"snakemake --profile profiles/slurm failed{timed_out}:\n{log[-6000:]}\n{tails}"
        )
    return workdir, submitted_jobs(log)


def records(workdir: Path) -> dict[str, dict]:
    return {
        str(p.relative_to(workdir)): json.loads(p.read_text())
        for p in (workdir / "results").rglob("*.prov.json")
    }


def test_every_cluster_job_ran_as_its_own_slurm_job(slurm_run):
    workdir, jobs = slurm_run
    remote = [j for j in jobs.values() if not j["local"] and j["rule"] != "all"]
    assert {j["rule"] for j in remote} >= {"import_manifest", "train", "evaluate"}
    assert all("slurm_id" in j for j in remote), [j for j in remote if "slurm_id" not in j]
    assert len({j["slurm_id"] for j in remote}) == len(remote)
    by_output = {out: j for j in jobs.values() for out in j["outputs"]}
    found = records(workdir)
    assert found
    for path, record in found.items():
        job = by_output[path]
        slurm = record["host"].get("slurm")
        if job["local"]:
            assert slurm is None, (path, slurm)
        else:
            assert slurm and slurm["job_id"] == job["slurm_id"], (path, slurm, job)


def test_train_and_evaluate_asked_for_an_a100_and_got_it(slurm_run):
    workdir, jobs = slurm_run
    picked = [j for j in jobs.values() if j["rule"] in ("train", "evaluate")]
    assert sorted(j["rule"] for j in picked) == ["evaluate", "train", "train"]
    for job in picked:
        sbatch = job["sbatch"]
        assert "--gpus=a100:1" in sbatch and "--cpus-per-gpu=1" in sbatch, sbatch
        assert " -p gpu " in sbatch and "--mem 2000" in sbatch and "-t 15" in sbatch, sbatch
        (record,) = [o for o in job["outputs"] if o.endswith(".prov.json")]
        slurm = json.loads((workdir / record).read_text())["host"]["slurm"]
        # the step the job runs in got one GPU (which one: CUDA_VISIBLE_DEVICES)
        assert slurm["partition"] == "gpu" and slurm.get("gpus_on_node") == "1", slurm
        assert slurm.get("cuda_visible_devices"), slurm
    for job in jobs.values():
        if job["rule"] not in ("train", "evaluate") and "sbatch" in job:
            assert "--gpus" not in job["sbatch"] and " -p gpu " not in job["sbatch"], job
    for run in REPLICAS:
        summary = json.loads((workdir / f"results/runs/{run}/train/summary.json").read_text())
        assert summary["status"] == "completed", summary


def job_times(log: str) -> tuple[dict[str, float], dict[str, float]]:
    """Snakemake job ID -> when it was submitted, and -> when it was seen finished, from the
    ``[Sat Dec  5 17:07:40 2026]`` lines a run log prints before each event (whole seconds)."""
    import time

    submitted: dict[str, float] = {}
    finished: dict[str, float] = {}
    now = None
    for line in log.splitlines():
        if m := re.match(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]$", line.strip()):
            now = time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
        elif m := re.match(r"^\s+jobid: (\d+)$", line):
            submitted.setdefault(m.group(1), now)
        elif m := re.match(r"^Finished jobid: (\d+)", line.strip()):
            finished[m.group(1)] = now
    return submitted, finished


def test_the_replicas_trained_side_by_side_as_two_slurm_jobs(slurm_run):
    """issue 14 section 3: the replicas' train jobs are separate SLURM jobs, and nothing makes one
    wait for the other: the second was submitted while the first was still queued or running, or
    else its own last prerequisite (its smoke run, audit or plan) finished no earlier than the
    first train job. Whether two jobs of seconds overlap in time depends on when their
    prerequisites finish on a 2-core node, so the overlap itself is not what is asserted."""
    workdir, jobs = slurm_run
    train = {i: j for i, j in jobs.items() if j["rule"] == "train"}
    assert len({j["slurm_id"] for j in train.values()}) == 2
    for seed, run in enumerate(REPLICAS):
        path = workdir / f"results/runs/{run}/train/summary.json"
        summary = json.loads(path.read_text())
        assert summary["recipe_settings"]["trainer"]["seed"] == seed
        record = json.loads(Path(f"{path}.prov.json").read_text())
        assert record["host"]["slurm"]["job_id"] in {j["slurm_id"] for j in train.values()}
    submitted, finished = job_times((workdir / "snakemake.log").read_text())
    first, second = sorted(train, key=lambda i: submitted[i])
    if submitted[second] <= finished[first]:
        return  # both were with SLURM at once
    run = next(r for r in REPLICAS if any(f"runs/{r}/" in o for o in train[second]["outputs"]))
    own = [
        finished[i]
        for i, j in jobs.items()
        if i in finished and i not in train and any(f"runs/{run}/" in o for o in j["outputs"])
        and finished[i] <= submitted[second]
    ]  # fmt: skip
    assert own and max(own) >= finished[first], (submitted, finished, train)


def test_artifacts_made_on_the_cluster_verify(slurm_run):
    workdir, _ = slurm_run
    assert (workdir / TARGET).is_file()
    assert asrflow_main(["verify", str(workdir / "results")]) == 0


def cancel_mid_run(
    workdir: Path, command: list[str], prefix: str, min_step: int, run: str = RUN
) -> tuple[int, str, int]:
    """Run ``command`` (snakemake under SLURM), scancel its jobs once the train job's
    ``last.ckpt`` holds step ``min_step`` or later, and wait for snakemake (and its retry) to
    end. Returns its exit code, its output and the step ``last.ckpt`` held when cancelled."""
    import time

    import torch

    last = workdir / f"results/work/{run}/checkpoints/last.ckpt"
    proc = subprocess.Popen(
        command, cwd=workdir, env=environment(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    cancelled_at = None
    try:
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline and proc.poll() is None and cancelled_at is None:
            time.sleep(1)
            if last.is_file():
                step = torch.load(last, map_location="cpu", weights_only=True)["global_step"]
                if step >= min_step:
                    cancelled_at = step
                    cancel_leftovers(prefix)
        assert cancelled_at is not None, f"the train job never got past step {min_step}"
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        cancel_leftovers(prefix)
    return proc.returncode, out, cancelled_at


def trained_steps(workdir: Path, run: str = RUN) -> list[int]:
    """The steps with a training loss in the run's metrics.csv, in file order."""
    rows = (workdir / f"results/work/{run}/csv/metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    loss, step = header.index("train/loss"), header.index("step")
    return [int(r.split(",")[step]) for r in rows[1:] if r.split(",")[loss]]


def test_scancelled_train_job_resumes_on_the_retry(slurm_run):
    """issue 5 section 4: a train job cancelled by SLURM (SIGTERM) saves last.ckpt at the next
    step; the profile's retry resumes from it, losing no more than one checkpoint interval."""
    workdir, _ = slurm_run
    recipe = tiny_recipe()
    recipe["trainer"].update(max_steps=160, val_check_interval=8)  # a bigger budget trains on
    (workdir / "config/recipes/tiny.yaml").write_text(yaml.safe_dump(recipe))
    prefix = f"asrflowtest_{uuid.uuid4().hex[:8]}"
    command = slurm_command(prefix)
    command[command.index("--retries") + 1] = "1"
    run = REPLICAS[0]
    command[-1] = f"results/runs/{run}/train/summary.json"
    # the resumed 8-step run has trained on: cancel it mid-run
    code, out, cancelled_at = cancel_mid_run(workdir, command, prefix, min_step=24, run=run)
    assert code == 0, out[-6000:]
    summary = json.loads((workdir / f"results/runs/{run}/train/summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 160, summary
    assert summary["resumed_from"], summary
    logs = "\n".join(
        p.read_text() for p in (workdir / ".snakemake/slurm_logs/rule_train").rglob("*.log")
    )
    saved = [int(s) for s in re.findall(r"SIGTERM: saved \S+ at step (\d+)", logs)]
    assert saved and saved[-1] >= cancelled_at, logs[-3000:]
    # the retry continued from the step the cancelled job saved: every step once in the metrics
    assert trained_steps(workdir, run) == list(range(160))
