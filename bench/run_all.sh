#!/bin/bash
# The CPU benchmarks of issue 15, one after another, each printing its table of ratios:
#
#   bench/run_all.sh [--quick] [OUT_DIR]     (default OUT_DIR results/bench; --quick: minutes)
#
# Each writes what it prints to OUT_DIR/<name>.txt (its log to <name>.log) and its figures as data
# to OUT_DIR/<name>.json (bench/figures.py, through ASRFLOW_BENCH_OUT): a file worth keeping is
# copied to docs/figures/ and rendered by bench/render_tables.py (docs/development.md).
#
#   1. bench/rerun_speed.py  - hashing against sha256sum, the cached re-check, the no-op dry run
#   2. bench/eval_speed.py   - asrflow's decoders against ESPnet's Speech2Text (beam 1 and 10)
#   3. bench/espnet_speed.py - asrflow's training loop against ESPnet2's trainer and a bare loop
#   4. bench/padding_sweep.py - the padding of the train sampler's batches by bucket count
#                              (no audio read; what padding costs a step: 3)
#   5. bench/shard_speed.py  - training's loader on per-file WAVs against Lhotse Shar shards
#                              (issue 16; makes its own corpus)
#   6. bench/worker_start.py - what a loader worker costs the training step, by how it starts
#                              (fork server, as asrflow's, against a fork of the trainer)
#
# 2-4 and 6 need the demo's data, tokenizer and exports (`uv run snakemake`, the README's main
# command, makes them); each script says what is missing and which command makes it. Each runs
# under a time limit, so that one failing stage leaves the others' figures. The GPU rows come from
# bench/gpu_check.sh on a GPU machine. Figures are ratios measured in one process: these machines
# are shared and noisy, so compare ratios, and look at the load average each script prints.
# PY names the interpreter (default: the project's uv environment).
set -u
QUICK=()
if [ "${1:-}" = "--quick" ]; then
    QUICK=(--quick)
    shift
fi
OUT=${1:-results/bench}
PY=${PY:-uv run python}
mkdir -p "$OUT"
export ASRFLOW_BENCH_OUT=$OUT
SUMMARY="$OUT/summary.txt"
START=$(date +%s)
{
    echo "asrflow benchmarks ${QUICK[*]:-(full)}: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' + uncommitted changes')"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
} | tee "$SUMMARY"

run() {  # run NAME LIMIT_S SCRIPT ARGS...
    local name=$1 limit=$2
    shift 2
    echo "== $name (+$(($(date +%s) - START)) s)" | tee -a "$SUMMARY"
    timeout -k 10 "$limit" $PY "$@" "${QUICK[@]}" >"$OUT/$name.txt" 2>"$OUT/$name.log"
    local status=$?
    cat "$OUT/$name.txt" | tee -a "$SUMMARY"
    if [ $status -ne 0 ]; then
        echo "$name: exit status $status; the end of $OUT/$name.log:" | tee -a "$SUMMARY"
        tail -5 "$OUT/$name.log" | tee -a "$SUMMARY"
    fi
}

run rerun_speed "${RERUN_S:-1200}" bench/rerun_speed.py
run eval_speed "${EVAL_S:-1200}" bench/eval_speed.py
run espnet_speed "${TRAIN_S:-2400}" bench/espnet_speed.py
run padding_sweep "${PADDING_S:-600}" bench/padding_sweep.py
run shard_speed "${SHARD_S:-1800}" bench/shard_speed.py
run worker_start "${WORKER_S:-1200}" bench/worker_start.py
echo "== done in $(($(date +%s) - START)) s; tables in $SUMMARY, figures in $OUT/*.json" |
    tee -a "$SUMMARY"
