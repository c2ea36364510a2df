"""Which process of a multi-process job this is, from what its launcher set in the environment.

Torch-free and cheap: every job script asks (:class:`asrflow.workflow.Step`: only rank 0 writes
the job's log and record) before anything is loaded. :mod:`asrflow.train.cluster` reads the rest
of the launch (world size, nodes, devices).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from asrflow.errors import AsrflowError


def env_int(env: Mapping[str, str], key: str, default: int) -> int:
    """An integer environment variable (``default`` when unset or empty); SLURM's ``2(x3)``
    form reads as its first number."""
    value = env.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        # SLURM_NTASKS_PER_NODE may read "2(x3)" on heterogeneous allocations
        head = value.split("(")[0].split(",")[0]
        try:
            return int(head)
        except ValueError:
            raise AsrflowError(f"environment variable {key}={value!r} is not a number") from None


def launched_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's global rank as its launcher marked it: 0 for the process that writes the
    job's log, provenance record, summary and outputs and that claims the work directory.

    Works before any ``Trainer`` exists and without the run's settings, which matters because
    Lightning's launcher starts the other ranks by running ``sys.argv`` again: under a Snakemake
    ``script:`` that is the whole job script, :func:`asrflow.workflow.step` included. Every
    launcher marks the ranks it starts: ``torchrun`` with ``RANK``, ``srun`` with
    ``SLURM_PROCID``, Lightning with ``LOCAL_RANK`` (and ``NODE_RANK`` on other nodes); the
    process Lightning starts from is unmarked (or ``LOCAL_RANK=0`` once it has started the
    others). It is 0 exactly where :func:`detect_cluster` gives global rank 0, and equal to its
    global rank except on a node other than the first under Lightning's launcher, which does not
    say how many processes a node runs (not a launch asrflow uses on SLURM).

    >>> launched_rank({"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "LOCAL_RANK": "1"})
    1
    """
    env = os.environ if env is None else env
    if env.get("RANK"):
        return env_int(env, "RANK", 0)
    procid = env_int(env, "SLURM_PROCID", 0)
    if procid > 0:
        return procid
    local = env_int(env, "LOCAL_RANK", 0)
    node = env_int(env, "NODE_RANK", env_int(env, "GROUP_RANK", 0))
    per_node = env_int(env, "LOCAL_WORLD_SIZE", 0) or env_int(env, "WORLD_SIZE", local + 1)
    return node * max(per_node, local + 1) + local
