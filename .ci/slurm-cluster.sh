#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the SLURM end-to-end test
# (tests/test_slurm_e2e.py). Debian 12 (slurm 22.05), as root, no systemd, no cgroups.
# Adapted from shared/reference/slurm-local-cluster.sh (without the accounting database:
# without slurmdbd `sacct` does not work, so profiles use `slurm-status-command: squeue`).
#
#   .ci/slurm-cluster.sh install   # apt-get install slurmctld slurmd slurm-client munge
#   .ci/slurm-cluster.sh start     # write slurm.conf, start munged, slurmctld, slurmd; wait for idle
#   .ci/slurm-cluster.sh stop      # stop the daemons this script started, by PID
#
# Environment:
#   SLURM_TEST_ROOT  config, state, logs and pid files (default /tmp/slurm-local)
#   FAKE_GPUS=N      advertise N fake GPUs (GRES gpu) so GPU jobs can be scheduled on a CPU
#                    node; jobs get CUDA_VISIBLE_DEVICES, there is no CUDA device behind it
#   FAKE_GPU_TYPE    the GRES type of the fake GPUs (default a100, what profiles/slurm asks for)
#
# The config is served configless (slurmd --conf-server): the jobstep plugin strips SLURM_CONF
# from the srun it runs inside each job, and client commands then find the config that slurmd
# caches under /run/slurm/conf. Outside jobs, client commands need SLURM_CONF=$ROOT/etc/slurm.conf
# (printed by `start`) unless /run/slurm/conf is there.
set -Eeuo pipefail

ROOT=${SLURM_TEST_ROOT:-/tmp/slurm-local}
ETC=$ROOT/etc; RUN=$ROOT/run; LOG=$ROOT/log; STATE=$ROOT/state
CONF=$ETC/slurm.conf
FAKE_GPUS=${FAKE_GPUS:-0}
FAKE_GPU_TYPE=${FAKE_GPU_TYPE:-a100}

do_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # slurm-client: sbatch/srun/squeue/scontrol/sinfo; munge: authentication between them
  apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge
}

write_conf() {
  mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/ctld" "$STATE/d"
  local host hw mem gres_types="" node_gres=""
  host=$(hostname -s)
  # the hardware as slurmd detects it (CPUs/Boards/Sockets/Cores/Threads) ...
  hw=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *RealMemory=[0-9]*//')
  # ... and memory with a margin, so the node never registers with "Low RealMemory" (drained)
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  mem=$((mem - 256))
  rm -f "$ETC/gres.conf"
  if [ "$FAKE_GPUS" -gt 0 ]; then
    gres_types="GresTypes=gpu"
    node_gres="Gres=gpu:${FAKE_GPU_TYPE}:${FAKE_GPUS}"
    # gres/gpu wants one File= per GPU, a character device: /dev/null clones stand in for
    # /dev/nvidiaN
    mkdir -p "$ROOT/fakedev"
    for i in $(seq 0 $((FAKE_GPUS - 1))); do
      if [ ! -c "$ROOT/fakedev/gpu$i" ]; then
        rm -f "$ROOT/fakedev/gpu$i"
        mknod -m 666 "$ROOT/fakedev/gpu$i" c 1 3
      fi
    done
    echo "NodeName=${host} Name=gpu Type=${FAKE_GPU_TYPE} File=$ROOT/fakedev/gpu[0-$((FAKE_GPUS - 1))]" \
      >"$ETC/gres.conf"
  fi
  cat >"$CONF" <<EOF
# tests/test_slurm_e2e.py submits to a cluster of this name without being asked to
ClusterName=asrflowci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# no cgroups here
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# no slurmdbd: sacct does not work ('Slurm accounting storage is disabled')
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MailProg=/bin/true
# finished jobs stay visible to squeue for 5 min: the executor plugin's squeue status mode
# needs MinJobAge >= 3 x slurm-init-seconds-before-status-checks
MinJobAge=300
# configless: slurmd fetches the config from slurmctld (see the header)
SlurmctldParameters=enable_configless
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=${STATE}/ctld
SlurmdSpoolDir=${STATE}/d
SlurmctldPidFile=${RUN}/slurmctld.pid
SlurmdPidFile=${RUN}/slurmd.pid
SlurmctldLogFile=${LOG}/slurmctld.log
SlurmdLogFile=${LOG}/slurmd.log
${gres_types}
NodeName=${host} NodeAddr=127.0.0.1 ${hw} RealMemory=${mem} ${node_gres} State=UNKNOWN
# like a site with CPU and GPU partitions (profiles/slurm sends GPU rules to "gpu"), on one node
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
EOF
}

start() {
  # a failed start leaves nothing running
  trap 'echo "start failed; stopping what was started" >&2; stop' ERR
  write_conf
  # a clean slate: no jobs, node states or cluster name saved by an earlier start
  rm -rf "${STATE:?}/ctld" "${STATE:?}/d"
  mkdir -p "$STATE/ctld" "$STATE/d"
  # munged as user munge on its standard socket /run/munge/munge.socket.2 (slurmd in configless
  # mode authenticates before it has a slurm.conf, so only the default socket works). No
  # systemd: create /run/munge ourselves.
  /usr/bin/install -d -o munge -g munge -m 0755 /run/munge
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  /usr/bin/install -d -o munge -g munge -m 0755 "$RUN/munge"
  runuser -u munge -- /usr/sbin/munged --pid-file="$RUN/munge/munged.pid"
  for _ in $(seq 20); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.25; done
  munge -n | unmunge >/dev/null
  # slurmctld and slurmd daemonize and write their pid files; -c: ignore any saved state
  /usr/sbin/slurmctld -c -f "$CONF"
  for _ in $(seq 40); do SLURM_CONF=$CONF scontrol ping >/dev/null 2>&1 && break; sleep 0.25; done
  /usr/sbin/slurmd --conf-server 127.0.0.1:6817
  local state=""
  for _ in $(seq 60); do
    state=$(SLURM_CONF=$CONF sinfo -h -N -o %t 2>/dev/null | head -1 || true)
    [ "$state" = idle ] && break
    sleep 0.5
  done
  SLURM_CONF=$CONF sinfo -N -o "%N %P %t %c %m %G"
  if [ "$state" != idle ]; then
    echo "node not idle (state=$state)" >&2
    tail -20 "$LOG"/slurm*.log >&2
    false
  fi
  trap - ERR
  echo "SLURM_CONF=$CONF"
}

stop() {
  local pf pid
  for pf in "$RUN/slurmd.pid" "$RUN/slurmctld.pid" "$RUN/munge/munged.pid"; do
    [ -s "$pf" ] || continue
    pid=$(cat "$pf")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      if kill -0 "$pid" 2>/dev/null; then echo "WARNING: $pf: pid $pid still alive" >&2; fi
    fi
    rm -f "$pf"
  done
}

case "${1:-}" in
  install) do_install ;;
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 install|start|stop" >&2
    exit 2
    ;;
esac
