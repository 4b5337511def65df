"""Do the package's GEMM tables describe the GPU in front of you? Time GEMMs here, read the table.

kvplan prices every linear layer from AIConfigurator's measured GEMM tables
(``aiconfigurator_core/systems/data/<gpu>/gemm/<engine>/<version>``). They were measured on
NVIDIA's machines, with one engine release's kernels. This script checks them against a GPU the
user holds, in two halves that need not run on the same machine:

- ``measure`` (on the GPU; torch only, no kvplan simulator or package): times each point of a
  fixed grid (m token rows x n outputs x k inputs, every point one the tables hold) in bf16
  through ``torch.nn.functional.linear`` (the tables' bf16 kernel source) and in per-tensor FP8
  through ``torch._scaled_mm`` (cuBLASLt; the tables' FP8 rows are vLLM's CUTLASS scaled-mm
  kernel, so a gap there can be the kernel, not the GPU). Each point is timed two ways:
  ``cold``, with L2 flushed before every call as a step that streams other layers' weights
  between two uses of this one sees it (``triton.testing.do_bench``), ``hot``, back to back
  (what a collector that loops on one GEMM measures), and ``graph``, replayed from a CUDA graph
  (no launch: how a decode step runs it; measurements made before this column lack it).
- ``compare`` (anywhere with ``aiconfigurator-core``): joins the measurement to the table rows at
  the same (dtype, m, n, k) and prints measured / table per dtype and m band, writing JSON and a
  Markdown table beside the measurement.

    python benchmarks/gemm_vs_tables.py measure --out benchmarks/results/gemm_h200_measured.json
    python benchmarks/gemm_vs_tables.py compare benchmarks/results/gemm_h200_measured.json \
        --gpu h200_sxm --engine vllm --version 0.24.0

A ratio near 1 says the tables are this GPU (and these kernels); a ratio well off 1 in one band
says where a prediction on this GPU will be off, and by how much, before any end-to-end run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # compare reads the tables through sim.pricing.table_data

#: Token rows: decode batches (1-256) to long prefill chunks (16k).
M_GRID = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: Output x input features, all grid values of the tables (a Llama-8B's o_proj is 4096 x 4096,
#: its down_proj at TP4 about 4096 x 4096, a 70B's at TP1 8192 x 28672 -> nearest 8192 x 16384).
NK_GRID = tuple((n, k) for n in (1024, 4096, 8192, 16384) for k in (1024, 4096, 8192, 16384))
DTYPES = ("bfloat16", "fp8")
#: m bands for the summary (decode-sized, mid, prefill-sized).
BANDS = ((1, 64, "m 1-64"), (128, 1024, "m 128-1024"), (2048, 1 << 30, "m 2048-16384"))


def _graph_ms(call, reps: int) -> "float | None":
    """Milliseconds of one call replayed from a CUDA graph of ``reps`` calls: the kernel without
    its launch, as a vLLM decode step runs it (None where capture fails)."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()  # warm the kernel choice outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                call()
        graph.replay()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(3):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end) / (3 * reps)
    except Exception:  # noqa: BLE001 - a shape without a graph keeps its other timings
        return None


def measure(out: Path, quick: bool = False) -> None:
    import torch
    import triton.testing  # type: ignore[import-untyped]  # triton ships no type information

    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    ms_grid = M_GRID[::3] if quick else M_GRID
    nk_grid = NK_GRID[::5] if quick else NK_GRID
    results: list = []
    torch.manual_seed(0)
    start = time.time()
    failed: list = []

    def save() -> None:  # after every n x k block: a run cut short keeps what it measured
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "device": name, "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "measured": time.strftime("%Y-%m-%d"),
            "method": "bf16: torch.nn.functional.linear; fp8: torch._scaled_mm per-tensor "
                      "(cuBLASLt), bf16 out; cold: triton.testing.do_bench median (L2 flushed per "
                      "call); hot: mean of 20 back-to-back calls between CUDA events; graph: one "
                      "call of 20 replayed from a CUDA graph (no launch)",
            "points": results, "failed": failed}, indent=1) + "\n")

    for dtype in DTYPES:
        for n, k in nk_grid:
            w = torch.randn(n, k, device=device, dtype=torch.bfloat16) / k ** 0.5
            w8 = w.to(torch.float8_e4m3fn) if dtype == "fp8" else None
            one = torch.ones((), device=device, dtype=torch.float32)
            for m in ms_grid:
                x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                if dtype == "bfloat16":
                    def call(x=x, w=w):
                        return torch.nn.functional.linear(x, w)
                else:
                    x8 = x.to(torch.float8_e4m3fn)
                    # cuBLASLt wants the second operand column-major: w8.t() of a row-major w8.
                    def call(x8=x8, w8=w8):
                        return torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16)
                try:
                    call()
                    torch.cuda.synchronize()
                    cold_ms = triton.testing.do_bench(call, warmup=5, rep=20, return_mode="median")
                    reps = 20
                    begin = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    begin.record()
                    for _ in range(reps):
                        call()
                    end.record()
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - one shape a kernel refuses is a row, not the run
                    failed.append({"dtype": dtype, "m": m, "n": n, "k": k, "error": str(exc)[:200]})
                    continue
                results.append({"dtype": dtype, "m": m, "n": n, "k": k, "cold_ms": cold_ms,
                                "hot_ms": begin.elapsed_time(end) / reps,
                                "graph_ms": _graph_ms(call, reps)})
            del w, w8
            save()
        print(f"{dtype}: {sum(r['dtype'] == dtype for r in results)} points, "
              f"{time.time() - start:.0f} s", flush=True)
    print(f"wrote {out} ({len(results)} points, {len(failed)} failed, {time.time() - start:.0f} s)")


def _table_rows(gpu: str, engine: str, version: str) -> tuple[Path, dict]:
    """The table's path and its columns (numpy arrays by name)."""
    from sim.pricing.table_data import package_tables_root, read_columns  # imports no package code

    root = package_tables_root()
    if root is None:
        sys.exit("error: aiconfigurator-core is not installed (pip install 'kvplan[tables]')")
    path = root / gpu / "gemm" / engine / version / "gemm_perf.parquet"
    if not path.exists():
        sys.exit(f"error: no GEMM table at {path}")
    return path, read_columns(path, ("gemm_dtype", "kernel_source", "m", "n", "k", "latency"))


def _band(m: int) -> str:
    return next(label for lo, hi, label in BANDS if lo <= m <= hi)


def compare(measured: Path, gpu: str, engine: str, version: str) -> dict:
    data = json.loads(measured.read_text())
    path, table = _table_rows(gpu, engine, version)
    lookup = {(str(d), int(m), int(n), int(k)): (float(t), str(src)) for d, src, m, n, k, t in zip(
        table["gemm_dtype"], table["kernel_source"], table["m"], table["n"], table["k"], table["latency"])}
    joined, missing = [], 0
    for p in data["points"]:
        hit = lookup.get((p["dtype"], p["m"], p["n"], p["k"]))
        if hit is None:
            missing += 1
            continue
        graph = p.get("graph_ms")
        joined.append({**p, "table_ms": hit[0], "table_kernel": hit[1],
                       "cold_ratio": p["cold_ms"] / hit[0], "hot_ratio": p["hot_ms"] / hit[0],
                       "graph_ratio": graph / hit[0] if graph else None})
    groups: dict = {}
    for j in joined:
        groups.setdefault((j["dtype"], _band(j["m"])), []).append(j)
    summary = []
    for (dtype, band), rows in sorted(groups.items()):
        cold = [r["cold_ratio"] for r in rows]
        hot = [r["hot_ratio"] for r in rows]
        graph = [r["graph_ratio"] for r in rows if r["graph_ratio"] is not None]
        summary.append({"dtype": dtype, "band": band, "points": len(rows),
                        "cold_median": statistics.median(cold), "cold_min": min(cold),
                        "cold_max": max(cold), "hot_median": statistics.median(hot),
                        "graph_median": statistics.median(graph) if graph else None,
                        "table_kernel": rows[0]["table_kernel"]})
    report = {"measured_on": data["device"], "torch": data.get("torch"), "date": data.get("measured"),
              "method": data.get("method"), "table": str(path.relative_to(path.parents[6])),
              "joined": len(joined), "missing_in_table": missing, "summary": summary, "points": joined}
    stem = measured.stem.replace("_measured", "") + f"_vs_{gpu}_{engine}_{version}"
    measured.with_name(stem + ".json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"GEMM time measured on {data['device']} (torch {data.get('torch')}, {data.get('measured')}) "
             f"over AIConfigurator's table {report['table']}: measured / table, median [min-max] over "
             f"the grid's n x k in each band. {len(joined)} points joined.", "",
             "| dtype | m band | points | cold (L2 flushed) | hot (back to back) | CUDA graph | table's kernel |",
             "|---|---|---:|---|---:|---:|---|"]
    for s in summary:
        graph = "-" if s["graph_median"] is None else f"{s['graph_median']:.2f}"
        lines.append(f"| {s['dtype']} | {s['band']} | {s['points']} | {s['cold_median']:.2f} "
                     f"[{s['cold_min']:.2f}-{s['cold_max']:.2f}] | {s['hot_median']:.2f} | {graph} | "
                     f"{s['table_kernel']} |")
    measured.with_name(stem + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the grid on this machine's GPU (torch + triton)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--quick", action="store_true", help="a few points only (a smoke test)")
    c = sub.add_parser("compare", help="measured / table, per dtype and m band")
    c.add_argument("measured", type=Path)
    c.add_argument("--gpu", default="h200_sxm", help="the tables' system folder (h100_sxm, h200_sxm, b200_sxm...)")
    c.add_argument("--engine", default="vllm")
    c.add_argument("--version", default="0.24.0")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out, args.quick)
    else:
        compare(args.measured, args.gpu, args.engine, args.version)


if __name__ == "__main__":
    main()
