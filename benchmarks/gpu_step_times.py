"""Step times of a fixed set of shapes on every GPU with measured tables, priced from the tables
(aiconfigurator-core) next to the roofline, and what the tables measure per GPU.

Shapes: Llama-3.1-8B (TP1), Llama-3.1-70B (TP4), Qwen3-30B-A3B (TP1), DeepSeek-V3 (TP8, block
FP8 weights), gpt-oss-120b (TP1, MXFP4 experts); steps: decode of 1, 32 and 256 sequences at
1,024 tokens of context each, and one 2,048-token prefill. Each cell is milliseconds for one
step, ``tables / roofline``; a deployment that does not fit the GPU, or that the tables do not
cover (the pricer's one-line reason), says so instead. Nothing here is measured on this
machine: it reads the package's tables and prices them, so the figures are the same anywhere.

    .venv/bin/python benchmarks/gpu_step_times.py [--engine-version 0.24.0]

Writes ``benchmarks/results/gpu_step_times.json`` and ``.md`` (the coverage table and the step
times, pasted into docs/cost_model.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.catalog.engines import DEFAULT_VLLM_VERSION, get_engine  # noqa: E402
from sim.errors import KvplanError  # noqa: E402
from sim.memory_plan import plan_memory  # noqa: E402
from sim.policies.step import StepShape  # noqa: E402
from sim.pricing import OperatorTableCostModel, make_pricer  # noqa: E402
from sim.pricing.table_data import (GPU_TABLE_DIRS, package_tables_root,  # noqa: E402
                                    package_version, read_columns_present, table_files)

MODELS = [  # (model, tensor parallel, weights)
    ("llama-3.1-8b", 1, None),
    ("llama-3.1-70b", 4, None),
    ("qwen3-30b-a3b", 1, None),
    ("deepseek-v3", 8, "fp8_block"),
    ("gpt-oss-120b", 1, "mxfp4"),
]
CONTEXT = 1024
SHAPES = {
    "decode 1": StepShape(num_decode_seqs=1, decode_context_tokens=CONTEXT),
    "decode 32": StepShape(num_decode_seqs=32, decode_context_tokens=32 * CONTEXT),
    "decode 256": StepShape(num_decode_seqs=256, decode_context_tokens=256 * CONTEXT),
    "prefill 2k": StepShape(num_prefill_tokens=2048, num_prefill_seqs=1,
                            prefill_attention_work=2048 * 2049 // 2),
}


def coverage(root: Path) -> list[dict]:
    """Per GPU: the vLLM version folders of each table, and the dtypes measured."""
    rows = []
    for hw, system in GPU_TABLE_DIRS.items():
        gdir = root / system
        row: dict = {"hardware": hw, "system": system}
        for op, table, col in (("gemm", "gemm_perf", "gemm_dtype"), ("moe", "moe_perf", "moe_dtype"),
                               ("attention", "generation_attention_perf", "kv_cache_dtype"),
                               ("mla", "mla_generation_module_perf", "kv_cache_dtype"),
                               ("quantize", "scale_matrix_perf", "quant_dtype")):
            try:
                files = table_files(gdir / op / "vllm", table)
            except KvplanError:
                row[op] = None
                continue
            dtypes: set = set()
            for path, _ in files:
                dtypes |= set(read_columns_present(path, (col,), ())[col].tolist())
            row[op] = {"versions": sorted({v for _, v in files}), "dtypes": sorted(dtypes)}
        rows.append(row)
    return rows


def price_all(engine_version: str) -> list[dict]:
    engine = get_engine("vllm", engine_version)
    out = []
    for hw in GPU_TABLE_DIRS:
        for model, tp, weights in MODELS:
            row: dict = {"hardware": hw, "model": model, "tp": tp, "weights": weights or "bf16"}
            try:
                plan_memory(model, hw, "bfloat16", tensor_parallel_size=tp, weight_dtype=weights)
            except KvplanError as exc:
                row["note"] = f"does not fit: {str(exc).split(';')[0][:120]}"
                out.append(row)
                continue
            kw = dict(dtype="bfloat16", tensor_parallel_size=tp, weight_dtype=weights)
            roof = make_pricer("roofline", model, hw, engine=engine, **kw)
            tab: Optional[OperatorTableCostModel]  # the kind's class: it has the tables' folder and version
            try:
                tab = cast(OperatorTableCostModel, make_pricer("operator_tables", model, hw, engine=engine, **kw))
            except KvplanError as exc:
                tab = None
                row["note"] = f"roofline only: {str(exc)[:160]}"
            for name, shape in SHAPES.items():
                row[name] = {"roofline_ms": round(roof.price(shape) * 1e3, 3),
                             "tables_ms": round(tab.price(shape) * 1e3, 3) if tab else None}
            if tab is not None:
                row["tables"] = f"{tab.gpu_dir.name}/vllm {tab.version}, GEMMs {tab.gemm_dtype}"
                row["warnings"] = tab.warnings()
            out.append(row)
    return out


def markdown(cov: list[dict], steps: list[dict], engine_version: str) -> str:
    lines = [f"Measured tables in aiconfigurator-core {package_version()} (vLLM backend): version "
             f"folders and dtypes per GPU; anything not listed is priced by the roofline.", "",
             "| GPU | system | GEMM (versions: dtypes) | MoE | decode attention (KV dtypes) | MLA | quantize |",
             "|---|---|---|---|---|---|---|"]

    def cell(c):
        return "-" if c is None else f"{', '.join(c['versions'])}: {', '.join(c['dtypes'])}"
    for r in cov:
        lines.append(f"| {r['hardware']} | {r['system']} | {cell(r['gemm'])} | {cell(r['moe'])} | "
                     f"{cell(r['attention'])} | {cell(r['mla'])} | {cell(r['quantize'])} |")
    lines += ["", f"Step times, ms (tables / roofline), engine vLLM {engine_version}, bf16 "
              f"activations, context {CONTEXT} tokens per decoding sequence:", "",
              "| GPU | model | " + " | ".join(SHAPES) + " | note |",
              "|---|---|" + "---|" * len(SHAPES) + "---|"]
    for r in steps:
        cells = []
        for name in SHAPES:
            v = r.get(name)
            if v is None:
                cells.append("-")
            else:
                t = "-" if v["tables_ms"] is None else f"{v['tables_ms']:.2f}"
                cells.append(f"{t} / {v['roofline_ms']:.2f}")
        label = f"{r['model']} TP{r['tp']} {r['weights']}"
        lines.append(f"| {r['hardware']} | {label} | " + " | ".join(cells) + f" | {r.get('note', '')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine-version", default=DEFAULT_VLLM_VERSION)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_step_times.json")
    args = ap.parse_args(argv)
    root = package_tables_root()
    if root is None:
        print("aiconfigurator-core is not installed (make install)", file=sys.stderr)
        return 2
    cov, steps = coverage(root), price_all(args.engine_version)
    args.out.write_text(json.dumps({"package": f"aiconfigurator-core {package_version()}",
                                    "engine": f"vllm {args.engine_version}", "context": CONTEXT,
                                    "coverage": cov, "steps": steps}, indent=1) + "\n")
    md = markdown(cov, steps, args.engine_version)
    args.out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
