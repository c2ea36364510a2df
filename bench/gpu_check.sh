#!/bin/bash
# GPU check: the README main command on one GPU, then bf16 evaluation and training-speed benches.
#
#   bench/gpu_check.sh [OUT_DIR]        (default results/gpu_check; figures in OUT_DIR/summary.txt)
#
# Each benchmark also writes its figures as JSON into OUT_DIR (bench/figures.py,
# ASRFLOW_BENCH_OUT): eval_dtype.json, espnet_speed.json, and train_speed.json under
# OUT_DIR/demo_conformer/ and OUT_DIR/a100_conformer/ (each a row of
# docs/figures/gpu_train_speed.json).
#
# Runs, each under a time limit so that one failing stage leaves the others' figures:
#   1. the whole DAG with bench/gpu.yaml (demo run on one GPU, precision auto = bf16-mixed);
#   2. bench/eval_dtype.py on cuda: an export decoded in float32 and bfloat16;
#   3. bench/train_speed.py: demo_conformer (32-true, bf16-mixed) and a100_conformer at 250-s
#      batches (32-true with TF32, bf16-mixed, bf16-true);
#   4. bench/espnet_speed.py --device cuda: a100_conformer at 250-s batches, asrflow's loop
#      against ESPnet2's trainer and a bare loop (bf16), peak memory and model FLOPs
#      utilisation (issue 15, section 5; not yet run on a GPU: ~3-5 minutes expected).
# PY and SNAKEMAKE name the interpreter and Snakemake (default: the project's uv environment).
# Stages 1-3 took 6 min 8 s on one H200 (docs/training.md, "On a GPU").
set -u
OUT=${1:-results/gpu_check}
PY=${PY:-uv run python}
SNAKEMAKE=${SNAKEMAKE:-uv run snakemake}
mkdir -p "$OUT"
export ASRFLOW_BENCH_OUT=$OUT
START=$(date +%s)
stamp() { echo "== $1 at +$(($(date +%s) - START))s" | tee -a "$OUT/summary.txt"; }

stamp setup
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$OUT/summary.txt" 2>&1
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
'bf16', torch.cuda.is_available() and torch.cuda.is_bf16_supported())" >>"$OUT/summary.txt" 2>&1

stamp "DAG"
timeout -k 10 "${DAG_S:-600}" $SNAKEMAKE --cores all --configfile config/config.yaml bench/gpu.yaml \
    >"$OUT/dag.log" 2>&1
echo "DAG exit status $?" >>"$OUT/summary.txt"
tail -3 "$OUT/dag.log" >>"$OUT/summary.txt"
$PY - >>"$OUT/summary.txt" 2>&1 <<'PY'
import json, pathlib
for p in sorted(pathlib.Path("results/runs").glob("*/train/summary.json")):
    s = json.loads(p.read_text())
    keys = ("status", "accelerator", "precision", "steps", "wall_seconds", "error")
    print(p, {k: s.get(k) for k in keys})
for p in sorted(pathlib.Path("results/runs").glob("*/selected.json")):
    print(p, json.loads(p.read_text())["reason"])
PY

TRAIN=results/data/demo/filtered/train.jsonl.gz
DEV=results/data/demo/filtered/dev.jsonl.gz
TOK=results/tokenizers/demo_unigram
stamp "eval dtype"
PKG=$(ls -d results/runs/demo_ctc/export/*/ | head -1)
timeout -k 5 120 $PY bench/eval_dtype.py "$PKG" $DEV --device cuda --threads 4 \
    >"$OUT/eval_dtype.txt" 2>&1
tail -4 "$OUT/eval_dtype.txt" >>"$OUT/summary.txt"

stamp "train speed, demo_conformer"
ASRFLOW_BENCH_OUT=$OUT/demo_conformer \
    timeout -k 5 120 $PY bench/train_speed.py config/recipes/demo_conformer.yaml --train $TRAIN \
    --dev $DEV --tokenizer $TOK --precisions 32-true bf16-mixed --steps 100 --warmup 20 \
    --threads 4 --set batching.num_workers=4 >"$OUT/train_speed_demo.txt" 2>&1
tail -4 "$OUT/train_speed_demo.txt" >>"$OUT/summary.txt"

stamp "train speed, a100_conformer"
ASRFLOW_BENCH_OUT=$OUT/a100_conformer \
    timeout -k 5 240 $PY bench/train_speed.py config/recipes/a100_conformer.yaml --train $TRAIN \
    --dev $DEV --tokenizer $TOK --precisions 32-true bf16-mixed bf16-true --steps 40 --warmup 8 \
    --threads 4 --set batching.max_duration=250 --set batching.num_workers=6 \
    --set batching.num_buckets=10 >"$OUT/train_speed_a100.txt" 2>&1
tail -5 "$OUT/train_speed_a100.txt" >>"$OUT/summary.txt"

stamp "asrflow against ESPnet2's trainer on the GPU, a100_conformer"
timeout -k 10 "${ESPNET_S:-300}" $PY bench/espnet_speed.py --device cuda --quick \
    --recipe config/recipes/a100_conformer.yaml --train $TRAIN --dev $DEV --tokenizer $TOK \
    --threads 4 --set trainer.devices=1 --set batching.max_duration=250 \
    --set batching.num_workers=6 --set batching.num_buckets=10 >"$OUT/espnet_speed_gpu.txt" 2>&1
if grep -q '^loop' "$OUT/espnet_speed_gpu.txt"; then  # the tables, else how it failed
    sed -n '/^loop/,$p' "$OUT/espnet_speed_gpu.txt" >>"$OUT/summary.txt"
else
    tail -5 "$OUT/espnet_speed_gpu.txt" >>"$OUT/summary.txt"
fi
stamp done
cat "$OUT/summary.txt"
