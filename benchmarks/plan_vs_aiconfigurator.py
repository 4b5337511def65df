"""``kvplan plan`` side by side with NVIDIA's AIConfigurator (issue #25, docs/plan.md).

Three cases AIConfigurator supports, one workload (fixed ISL 4000 / OSL 500) and one SLO (TTFT
1000 ms, TPOT 50 ms), vLLM backend, aggregated serving, an 8-GPU budget on AIConfigurator's side:

1. Llama-3.1-70B FP8 (``nvidia/Llama-3.1-70B-Instruct-FP8``) on H200,
2. Qwen3-32B BF16 (``Qwen/Qwen3-32B``) on H100-SXM,
3. Qwen3-235B-A22B FP8 block-scaled (``Qwen/Qwen3-235B-A22B-FP8``) on H200.

AIConfigurator answers "the best configuration on 8 GPUs" and predicts its request rate R;
kvplan is asked "the cheapest deployment for R inside the SLO at p99" on the same GPU type.
Then kvplan simulates both deployments:

- each fleet (AIConfigurator's 8 GPUs, kvplan's plan) open loop (Poisson) at R, with the SLO
  judged per request (goodput = requests/s meeting both bounds);
- ``kvplan capacity --target-rate R`` on AIConfigurator's configuration (the GPUs kvplan says
  that configuration needs for R at p99);
- AIConfigurator's static operating point, one replica at its concurrency in a closed loop
  (clients ramped up over 25 s, about one request's lifetime, so they are not in lock-step; no
  API-server front end, as AIConfigurator, and because of a ramp-up bug, docs/plan.md).

    .venv/bin/python benchmarks/plan_vs_aiconfigurator.py                  # rerun kvplan's side
    .venv/bin/python benchmarks/plan_vs_aiconfigurator.py --aic-venv /tmp/aicenv   # and AIC's
    .venv/bin/python benchmarks/plan_vs_aiconfigurator.py --table-only     # print saved results
    .venv/bin/python benchmarks/plan_vs_aiconfigurator.py --cases 2        # one case

AIConfigurator goes in a venv of its own (``python3 -m venv /tmp/aicenv && /tmp/aicenv/bin/pip
install aiconfigurator``). Without ``--aic-venv`` its recorded answer in the results folder is
used. Results: ``benchmarks/results/plan_vs_aiconfigurator/``; kvplan's side takes about 10
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "plan_vs_aiconfigurator"
KVPLAN = [sys.executable, "-m", "kvplan"]
ISL, OSL = 4000, 500
TTFT_MS, TPOT_MS = 1000, 50
TOTAL_GPUS = 8
#: kvplan's plan: room for the prompt and the answer (AIConfigurator's deployment uses 6000).
PLAN_MAX_MODEL_LEN = 4608
#: Open-loop runs of a whole fleet: arrivals spanning this many seconds at R.
FLEET_SECONDS = 300
#: Closed loop at AIConfigurator's concurrency: requests per client, and the ramp-up.
CLOSED_REQUESTS_PER_CLIENT = 10
RAMP_UP_S = 25


@dataclass(frozen=True)
class Case:
    n: int
    key: str
    title: str
    model: str          # the Hugging Face id, the same for both tools
    aic_system: str
    hardware: str       # kvplan's catalog name
    weights: str        # kvplan's quantization.weights for the checkpoint


CASES = (
    Case(1, "llama31_70b_fp8_h200", "Llama-3.1-70B FP8, H200", "nvidia/Llama-3.1-70B-Instruct-FP8",
         "h200_sxm", "h200", "fp8"),
    Case(2, "qwen3_32b_bf16_h100", "Qwen3-32B BF16, H100-SXM", "Qwen/Qwen3-32B", "h100_sxm", "h100-sxm",
         "none"),
    Case(3, "qwen3_235b_fp8_h200", "Qwen3-235B-A22B FP8 (block), H200", "Qwen/Qwen3-235B-A22B-FP8",
         "h200_sxm", "h200", "fp8_block"),
)

WORKLOAD = [f"workload.input_len={{dist: fixed, mean: {ISL}}}",
            f"workload.output_len={{dist: fixed, mean: {OSL}}}"]
SLO = f"ttft_p99_ms={TTFT_MS},tpot_p99_ms={TPOT_MS}"


# ---------------------------------------------------------------------------------------------
# AIConfigurator
# ---------------------------------------------------------------------------------------------

def aic_command(case: Case, aic_bin: str, save_dir: str) -> list[str]:
    return [aic_bin, "cli", "default", "--model", case.model, "--system", case.aic_system,
            "--backend", "vllm", "--serving-mode", "agg", "--total-gpus", str(TOTAL_GPUS),
            "--isl", str(ISL), "--osl", str(OSL), "--ttft", str(TTFT_MS), "--tpot", str(TPOT_MS),
            "--no-color", "--save-dir", save_dir]


def run_aic(case: Case, venv: Path) -> None:
    """Run AIConfigurator for one case; keep its stdout, its top-N table and the vLLM flags of
    its top configuration."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = aic_command(case, str(venv / "bin" / "aiconfigurator"), tmp)
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if proc.returncode != 0:
            raise SystemExit(f"aiconfigurator failed ({proc.returncode}): {proc.stderr[-2000:]}")
        (RESULTS / f"aic_{case.key}.txt").write_text(
            "$ " + " ".join(cmd[:1] + cmd[1:-2]) + "\n" + _strip_aic_log(proc.stdout + proc.stderr))
        topn = next(Path(tmp).rglob("agg/best_config_topn.csv"))
        shutil.copy(topn, RESULTS / f"aic_{case.key}_topn.csv")
        run_sh = topn.parent / "top1" / "run_0.sh"
        flags = _vllm_flags(run_sh.read_text()) if run_sh.exists() else {}
    version = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('aiconfigurator'))"],
                             capture_output=True, text=True).stdout.strip()
    rec = _aic_record(case, (RESULTS / f"aic_{case.key}_topn.csv").read_text(), flags)
    rec.update(aiconfigurator_version=version, wall_s=round(wall, 1))
    (RESULTS / f"aic_{case.key}.json").write_text(json.dumps(rec, indent=1) + "\n")


def _strip_aic_log(text: str) -> str:
    """AIConfigurator's report without the deprecation warnings and per-file loading lines."""
    drop = ("DeprecationWarning", "sys.exit(main())", "deprecation.py", "low-fidelity fallback",
            "No exact CLI args template")
    return "\n".join(line for line in text.splitlines() if not any(d in line for d in drop)) + "\n"


def _vllm_flags(script: str) -> dict:
    """The engine flags AIConfigurator's generated launch script passes vLLM."""
    out = {}
    for flag in ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size",
                 "kv-cache-dtype", "max-model-len", "max-num-seqs", "max-num-batched-tokens"):
        m = re.search(rf"--{flag}\s+\"?([^\"\s]+)\"?", script)
        if m:
            out[flag] = m.group(1)
    out["enable-expert-parallel"] = "--enable-expert-parallel" in script
    return out


def _aic_record(case: Case, topn_csv: str, flags: dict) -> dict:
    rows = list(csv.DictReader(io.StringIO(topn_csv)))
    top = rows[0]
    gpus_per_replica = int(top["num_total_gpus"])
    replicas = TOTAL_GPUS // gpus_per_replica
    f = lambda k: float(top[k])  # noqa: E731
    return {
        "case": case.n, "model": case.model, "system": case.aic_system, "backend": top["backend"],
        "perf_db_version": top["version"], "parallel": top["parallel"],
        "tp": int(top["tp"]), "pp": int(top["pp"]), "dp": int(top["dp"]),
        "moe_tp": int(top["moe_tp"]), "moe_ep": int(top["moe_ep"]),
        "gemm": top["gemm"], "kvcache": top["kvcache"], "fmha": top["fmha"],
        "batch_size_per_worker": int(top["bs"]), "concurrency_per_replica": int(top["concurrency"]),
        "gpus_per_replica": gpus_per_replica, "replicas": replicas, "gpus": gpus_per_replica * replicas,
        "request_rate_per_replica": f("request_rate"),
        "request_rate": round(f("request_rate") * replicas, 2),
        "ttft_ms": f("ttft"), "tpot_ms": f("tpot"), "request_latency_ms": f("request_latency"),
        "tokens_per_s_per_gpu": f("tokens/s/gpu"), "tokens_per_s_per_user": f("tokens/s/user"),
        "vllm_flags": flags,
    }


def aic_overrides(case: Case, aic: dict) -> list[str]:
    """AIConfigurator's top configuration as kvplan keys (one replica).

    Weights: the checkpoint's quantisation (kvplan's ``case.weights``; AIConfigurator's ``gemm``
    column says the same: fp8_static, bfloat16, fp8_block). KV dtype, engine limits and
    parallelism: the flags of its generated vLLM launch script. A MoE with attention DP > 1:
    kvplan spreads the experts over the DP x TP GPUs (expert parallelism), which is
    AIConfigurator's etp1/ep=DP layout; its etp=DP/ep1 layout (experts tensor-split) has no
    kvplan equivalent."""
    fl = aic["vllm_flags"]
    keys = [f"model={case.model}", f"hardware={case.hardware}",
            f"parallel.tensor_parallel_size={aic['tp']}",
            f"parallel.pipeline_parallel_size={aic['pp']}",
            f"parallel.data_parallel_size={aic['dp']}",
            f"quantization.weights={case.weights}",
            f"kv_cache.dtype={'fp8' if aic['kvcache'].startswith('fp8') else 'auto'}"]
    if aic["moe_ep"] > 1 and aic["dp"] == 1:
        keys.append("parallel.enable_expert_parallel=true")
    for flag, key in (("max-model-len", "kv_cache.max_model_len"),
                      ("max-num-seqs", "scheduler.max_num_seqs"),
                      ("max-num-batched-tokens", "scheduler.max_num_batched_tokens")):
        if flag in fl:
            keys.append(f"{key}={fl[flag]}")
    return keys + WORKLOAD


# ---------------------------------------------------------------------------------------------
# kvplan
# ---------------------------------------------------------------------------------------------

def _sets(keys: list[str]) -> list[str]:
    return [a for k in keys for a in ("--set", k)]


def plan_command(case: Case, rate: float) -> list[str]:
    return (["kvplan", "plan"] + _sets([f"model={case.model}"] + WORKLOAD
                                       + [f"kv_cache.max_model_len={PLAN_MAX_MODEL_LEN}"])
            + ["--slo", SLO, "--target-rate", f"{rate:g}", "--hardware", case.hardware,
               "--search", f"weights={case.weights}"])


def capacity_command(case: Case, aic: dict, rate: float) -> list[str]:
    return ["kvplan", "capacity"] + _sets(aic_overrides(case, aic)) + [
        "--slo", SLO, "--target-rate", f"{rate:g}"]


def fleet_command(keys: list[str], replicas: int, rate: float) -> list[str]:
    """One open-loop (Poisson) run of a whole fleet at the rate, SLO judged per request."""
    return ["kvplan", "simulate"] + _sets(keys + [
        f"parallel.num_replicas={replicas}", "workload.arrival.process=poisson",
        f"workload.arrival.rate={rate:g}", f"workload.num_requests={round(rate * FLEET_SECONDS)}",
        f"slo.ttft_ms={TTFT_MS}", f"slo.tpot_ms={TPOT_MS}"]) + ["--json"]


def closed_command(keys: list[str], concurrency: int, frontend: str = "none") -> list[str]:
    """One replica at AIConfigurator's concurrency, closed loop. ``engine.frontend=none`` by
    default: AIConfigurator models no API server, and kvplan's default front end delays every
    request sent during a closed loop's ramp-up until the ramp has ended (docs/plan.md, "Problems
    found"); the ``api_server`` run is kept beside it to show that."""
    return ["kvplan", "simulate"] + _sets(keys + [f"engine.frontend={frontend}",
        "workload.arrival.process=closed", f"workload.arrival.concurrency={concurrency}",
        f"workload.arrival.ramp_up_s={RAMP_UP_S}",
        f"workload.num_requests={concurrency * CLOSED_REQUESTS_PER_CLIENT}",
        f"slo.ttft_ms={TTFT_MS}", f"slo.tpot_ms={TPOT_MS}"]) + ["--json"]


def _kvplan(args: list[str], out_txt: Path | None = None) -> str:
    env = dict(os.environ, COLUMNS="200")
    t0 = time.time()
    proc = subprocess.run(KVPLAN + args[1:] + ["--no-progress"], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    print(f"  {args[1]} ({time.time() - t0:.0f} s, rc {proc.returncode})", flush=True)
    if out_txt is not None:
        out_txt.write_text("$ " + shell(args) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{shell(args)}\n{proc.stderr.strip()[-2000:]}")
    return proc.stdout


def shell(args: list[str]) -> str:
    """A command line to paste into a shell."""
    def q(a: str) -> str:
        return f"'{a}'" if re.search(r"[\s{}]", a) else a
    return " ".join(q(a) for a in args)


SUMMARY_KEYS = ("num_requests", "completed", "duration_s", "request_throughput", "goodput",
                "slo_attainment", "output_throughput_per_gpu", "achieved_concurrency",
                "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "median_itl_ms",
                "p99_itl_ms", "mean_e2el_ms", "num_gpu_blocks")


def _summary(stdout: str, cmd: list[str]) -> dict:
    d = json.loads(stdout)
    return {"command": shell(cmd), **{k: d.get(k) for k in SUMMARY_KEYS}}


def run_kvplan(case: Case, aic: dict) -> None:
    rate = aic["request_rate"]
    cmd = plan_command(case, rate)
    _kvplan(cmd + ["--out", str(RESULTS / f"kvplan_plan_{case.key}.json")],
            RESULTS / f"kvplan_plan_{case.key}.txt")
    plan = json.loads((RESULTS / f"kvplan_plan_{case.key}.json").read_text())
    best = _planned_row(plan)

    cap_cmd = capacity_command(case, aic, rate)
    with tempfile.TemporaryDirectory() as tmp:
        _kvplan(cap_cmd + ["--out", f"{tmp}/cap.json"], RESULTS / f"kvplan_capacity_aic_{case.key}.txt")
        cap = json.loads(Path(f"{tmp}/cap.json").read_text())
    cap.pop("evaluations", None)  # every simulation's metrics: most of the file, all in the .txt
    cap["command"] = shell(cap_cmd)
    (RESULTS / f"kvplan_capacity_aic_{case.key}.json").write_text(json.dumps(cap, indent=1, default=str) + "\n")

    aic_keys = aic_overrides(case, aic)
    assert best is not None, f"{case.key}: kvplan planned no row that meets the SLO"
    kv_keys = [f"model={case.model}"] + WORKLOAD + [f"kv_cache.max_model_len={PLAN_MAX_MODEL_LEN}"] + best["overrides"]
    sims = {}
    for name, cmd in (("aic_fleet", fleet_command(aic_keys, aic["replicas"], rate)),
                      ("kvplan_fleet", fleet_command(kv_keys, best["replicas"], rate)),
                      ("aic_closed", closed_command(aic_keys, aic["concurrency_per_replica"])),
                      ("aic_closed_api_server",
                       closed_command(aic_keys, aic["concurrency_per_replica"], "api_server"))):
        sims[name] = _summary(_kvplan(cmd), cmd)
    (RESULTS / f"kvplan_sims_{case.key}.json").write_text(json.dumps(sims, indent=1) + "\n")


def _planned_row(plan: dict) -> dict | None:
    rows = [r for r in plan.get("rows", []) if r.get("status") == "planned" and r.get("meets_slo")]
    return min(rows, key=lambda r: (r["usd_per_hour"], r["usd_per_million_output_tokens"])) if rows else None


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

def _price(hw: str) -> float:
    from analysis.pricing import usd_per_gpu_hour
    return usd_per_gpu_hour(hw)


def _aic_label(aic: dict) -> str:
    par = f"TP{aic['tp']}" + (f" PP{aic['pp']}" if aic["pp"] > 1 else "")
    if aic["dp"] > 1:
        par += f" DP{aic['dp']} (MoE etp{aic['moe_tp']} ep{aic['moe_ep']})"
    elif aic["moe_ep"] > 1:
        par += f" EP{aic['moe_ep']}"
    kv = "fp8" if aic["kvcache"].startswith("fp8") else "bf16"
    return (f"{par}, w {aic['gemm']}, KV {kv}, x{aic['replicas']} replicas, "
            f"bs {aic['batch_size_per_worker']}/worker (concurrency {aic['concurrency_per_replica']}/replica)")


def _kv_label(row: dict) -> str:
    c = row["config"]
    par = f"TP{c.get('parallel.tensor_parallel_size', 1)}"
    if c.get("parallel.pipeline_parallel_size", 1) > 1:
        par += f" PP{c['parallel.pipeline_parallel_size']}"
    if c.get("parallel.enable_expert_parallel"):
        par += " EP"
    kv = "fp8" if c.get("kv_cache.dtype") == "fp8" else "bf16"
    return f"{par}, w {c.get('quantization.weights')}, KV {kv}, x{row['replicas']} replicas"


def _fmt(x, nd=0):
    return "-" if x is None else f"{x:,.{nd}f}"


def table(cases: list[Case]) -> str:
    lines = ["| case | tool: recommended deployment | GPUs | $/hour | that tool's prediction "
             "(req/s; TTFT / TPOT ms) | kvplan, that fleet at R: goodput req/s (SLO met) | "
             "p99 TTFT / TPOT ms | kvplan capacity: GPUs for R at p99 |",
             "|---|---|---|---|---|---|---|---|"]
    closed = ["| case | AIConfigurator at its point: req/s per replica, TTFT / TPOT ms (concurrency) | "
              "kvplan closed loop, same config and concurrency: req/s, mean TTFT / TPOT ms | "
              "p99 TTFT / TPOT ms | same with the default API-server front end: mean / p99 TTFT ms |",
              "|---|---|---|---|---|"]
    for case in cases:
        try:
            aic = json.loads((RESULTS / f"aic_{case.key}.json").read_text())
            plan = json.loads((RESULTS / f"kvplan_plan_{case.key}.json").read_text())
            cap = json.loads((RESULTS / f"kvplan_capacity_aic_{case.key}.json").read_text())
            sims = json.loads((RESULTS / f"kvplan_sims_{case.key}.json").read_text())
        except FileNotFoundError as e:
            lines.append(f"| {case.n}. {case.title} | missing result: {Path(e.filename).name} | | | | | | |")
            continue
        price = _price(case.hardware)
        rate = aic["request_rate"]
        af, kf, ac = sims["aic_fleet"], sims["kvplan_fleet"], sims["aic_closed"]
        aa = sims.get("aic_closed_api_server") or {}
        best = _planned_row(plan)
        lines.append(
            f"| {case.n}. {case.title}, R = {rate:g} req/s | AIConfigurator: {_aic_label(aic)} | "
            f"{aic['gpus']} | ${aic['gpus'] * price:.2f} | {rate:g}; {aic['ttft_ms']:.0f} / "
            f"{aic['tpot_ms']:.1f} (static batch) | {_fmt(af['goodput'], 2)} "
            f"({100 * af['slo_attainment']:.1f}%) | {_fmt(af['p99_ttft_ms'])} / {_fmt(af['p99_tpot_ms'], 1)} | "
            f"{cap.get('gpus')} (${cap.get('usd_per_hour') or 0:.2f}) |")
        if best is None:
            lines.append(f"| | kvplan plan: no deployment meets the SLO | | | | | | |")
        else:
            lines.append(
                f"| | kvplan plan: {_kv_label(best)} | {best['gpus']} | ${best['usd_per_hour']:.2f} | "
                f"{rate:g} at p99 {best['p99_ttft_ms']:.0f} / {best['p99_tpot_ms']:.1f} (fleet simulated) | "
                f"{_fmt(kf['goodput'], 2)} ({100 * kf['slo_attainment']:.1f}%) | "
                f"{_fmt(kf['p99_ttft_ms'])} / {_fmt(kf['p99_tpot_ms'], 1)} | {best['gpus']} |")
        closed.append(
            f"| {case.n}. {case.title} | {aic['request_rate_per_replica']:.2f}; {aic['ttft_ms']:.0f} / "
            f"{aic['tpot_ms']:.1f} ({aic['concurrency_per_replica']}) | {ac['request_throughput']:.2f}; "
            f"{ac['mean_ttft_ms']:.0f} / {ac['mean_tpot_ms']:.1f} | {ac['p99_ttft_ms']:.0f} / "
            f"{ac['p99_tpot_ms']:.1f} | {_fmt(aa.get('mean_ttft_ms'))} / {_fmt(aa.get('p99_ttft_ms'))} |")
    return "\n".join(lines) + "\n\n" + "\n".join(closed) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aic-venv", type=Path, help="a venv with aiconfigurator installed: rerun its side too")
    ap.add_argument("--cases", default="1,2,3", help="comma-separated case numbers (default 1,2,3)")
    ap.add_argument("--table-only", action="store_true", help="print the table from saved results")
    args = ap.parse_args()
    cases = [c for c in CASES if str(c.n) in args.cases.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for case in cases:
            print(f"case {case.n}: {case.title}", flush=True)
            if args.aic_venv is not None:
                run_aic(case, args.aic_venv)
                print("  aiconfigurator done", flush=True)
            aic = json.loads((RESULTS / f"aic_{case.key}.json").read_text())
            try:
                run_kvplan(case, aic)
                (RESULTS / f"kvplan_error_{case.key}.txt").unlink(missing_ok=True)
            except RuntimeError as e:  # record it and go on with the other cases
                print(f"  kvplan failed: {e}", flush=True)
                (RESULTS / f"kvplan_error_{case.key}.txt").write_text(str(e) + "\n")
    print(table(cases))


if __name__ == "__main__":
    main()
