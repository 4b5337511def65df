"""kvplan against the published means of inference-sim's other vLLM 0.15.1 runs: models, GPUs and
server settings the shared runs do not have, replayed through the collection's own layout.

Why: ``../shared/real_runs`` holds 16 runs of four models on H100 at one server setting. The
collection they come from (BLIS's sim-to-real ground truth) has more: Llama-3.1-8B, Qwen3-14B,
Mixtral-8x22B, Llama-4-Scout FP8, Llama-3.1-70B, Mistral-NeMo, Qwen2.5-7B and Yi-34B, on H100, A100
and L40S, with sweeps of the token budget, GPU memory fraction, CPU KV offload, TP and DP. Its
runs are not public, but the per-stage measured means are: inference-sim/
sim-to-real-accuracy-validation publishes them as the ``actual`` column of its error records
(``results/cluster_2000req/error_records.csv`` at 9bcf939 and ``results_trainval/error_records.csv``
at dcec3fd; one row per simulator, stage and metric, the same ``actual`` in each). They are
copied below (mean TTFT and mean E2E per load stage, ms), cited, never fitted.

How each is replayed, as a user with that run would: a folder ``<id>-<slug>`` beside a one-entry
``experiments.json`` (the collection's manifest: hw, tp, dp, precision, mbt, gpu_mem,
cpu_offload), holding the inference-perf profile of its workload. The collection's four workloads
(general, codegen, roleplay, reasoning) are the shared runs' (``../shared/real_runs/README.md``:
the same groups, lengths and stage rates in every run), so a shared run of the same workload lends
its ``profile.yaml``, ``results/config.yaml`` and the client's re-tokenised prompt lengths (a
Mistral or CodeLlama tokenizer's count: other tokenizers differ by a few percent) and
``exp-config.yaml`` is rewritten with the run's model, TP and token budget. The release is the
collection's (vLLM 0.15.1, ``--set engine.version=0.15.1``).

The ``-lite`` workload is "the same token distributions as General at 6 rps peak" (the
collection's figure design, docs/superpowers/specs/2026-03-16-publication-figures-design.md in
that repository); its first stage's rate is not published. Those runs (A100 and L40S among them)
are left out unless ``--lite-rates R0,R1`` gives both rates, an assumption printed with the result:
``--lite-rates 2.4,6`` is General's 8 and 20 req/s scaled to that peak.

A stage whose measured means say it queued (``calibration.validate_real.queued_by_means``: mean
TTFT above 1 s and above half the mean E2E, the rule ``kvplan validate --real`` applies) was
overloaded: it is scored by whether kvplan also predicts an overload, not by its error.

    .venv/bin/python benchmarks/public_vllm_runs.py [--lite-rates 2.4,6] [--only 16-llama] \
        [--stage-seconds S] [--out benchmarks/results/public_vllm_runs.json]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.real_runs import read_run  # noqa: E402
from calibration.validate_real import compare_run, queued_by_means  # noqa: E402
from sim.errors import KvplanError  # noqa: E402

SHARED_RUNS = ROOT.parent / "shared" / "real_runs" / "vllm_0.15.1_h100"
#: A shared run of each workload, lending its load profile and measured prompt lengths. CodeLlama's
#: reasoning run is the one of the four that was not overloaded.
TEMPLATES = {
    "general": "20260218-130541-mixtral-8x7b-v0-1-tp2-general",
    "codegen": "20260218-120914-mixtral-8x7b-v0-1-tp2-codegen",
    "roleplay": "20260218-141024-mixtral-8x7b-v0-1-tp2-roleplay",
    "reasoning": "20260218-160939-codellama-34b-tp2-reasoning",
}
#: Output tokens per request of each workload (TPOT = (E2E - TTFT) / (output - 1)).
OUTPUT_LEN = {"general": 248, "codegen": 247, "roleplay": 251, "reasoning": 1448}
VERSION = "0.15.1"
SOURCE = ("inference-sim/sim-to-real-accuracy-validation: results/cluster_2000req/error_records.csv "
          "@9bcf939 and results_trainval/error_records.csv @dcec3fd, column 'actual' (per-stage means)")


@dataclass(frozen=True)
class Run:
    """One measured run: the manifest's facts and the measured (TTFT, E2E) means per stage, ms."""

    name: str
    model: str
    hw: str
    tp: int
    dp: Optional[int]
    precision: str
    cpu_offload: Optional[bool]
    gpu_mem: Optional[float]
    mbt: int
    stages: tuple[tuple[float, float], ...]

    @property
    def workload(self) -> str:
        base = next(w for w in TEMPLATES if f"-{w}" in self.name)
        return base + ("-lite" if "-lite" in self.name else "")

    @property
    def id(self) -> int:
        return int(self.name.split("-", 1)[0])


# Runs of the collection not in ../shared (those 16 are benchmarks/sim_vs_real_vllm.py's), less
# 57-codellama-34b-tp2-general-lite-2-1 (two different measurements under one name) and the
# reasoning-lite runs (rate not published).
RUNS: tuple[Run, ...] = (
    Run("13-qwen3-14b-tp1-general-1", "Qwen/Qwen3-14B", "H100", 1, None, "FP16", False, 0.9, 2048,
        ((41.68, 3311.6), (54.5, 4365.12))),
    Run("14-qwen3-14b-tp1-codegen-1", "Qwen/Qwen3-14B", "H100", 1, None, "FP16", False, 0.9, 2048,
        ((39.63, 3120.34), (43.28, 3417.91))),
    Run("15-qwen3-14b-tp1-roleplay-1", "Qwen/Qwen3-14B", "H100", 1, None, "FP16", False, 0.9, 2048,
        ((41.32, 3284.99),)),
    Run("16-llama-3-1-8b-tp1-general-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.9,
        2048, ((25.23, 1892.7), (29.87, 2278.06))),
    Run("18-llama-3-1-8b-tp1-codegen-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.9,
        2048, ((24.52, 1813.32), (25.66, 1927.89))),
    Run("19-llama-3-1-8b-tp1-roleplay-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.9,
        2048, ((26.0, 1884.78),)),
    Run("22-llama-3-1-8b-tp1-general-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.9,
        1024, ((26.03, 1984.92), (33.32, 2581.89))),
    Run("23-llama-3-1-8b-tp1-general-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.9,
        8192, ((25.65, 1884.86), (30.41, 2236.2))),
    Run("24-llama-3-1-8b-tp1-general-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", True, 0.9,
        2048, ((26.11, 1857.59), (31.0, 2229.71))),
    Run("25-llama-3-1-8b-tp1-general-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.95,
        2048, ((25.18, 1898.6), (29.4, 2229.93))),
    Run("26-llama-3-1-8b-tp2-general-2", "meta-llama/Llama-3.1-8B-Instruct", "H100", 2, None, "FP16", False, 0.9,
        2048, ((19.05, 1228.25), (21.71, 1407.21))),
    Run("46-llama-3-1-8b-tp1-reasoning-1", "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, None, "FP16", False, 0.9,
        2048, ((50.08, 22753.02),)),
    Run("27-mixtral-8x7b-tp2-general-2", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 1, "FP16", False, 0.9, 1024,
        ((40804.87, 58959.7), (135518.09, 154747.47))),
    Run("28-mixtral-8x7b-tp2-general-2", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 1, "FP16", False, 0.9, 8192,
        ((66.95, 4806.29), (62.41, 5121.13))),
    Run("29-mixtral-8x7b-tp2-general-2", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 1, "FP16", True, 0.9, 2048,
        ((64.55, 4799.9), (66.09, 5112.45))),
    Run("30-mixtral-8x7b-tp2-general-2", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 1, "FP16", False, 0.95, 2048,
        ((70.22, 4802.07), (61.21, 5079.46))),
    Run("31-mixtral-8x7b-tp4-general-4", "mistralai/Mixtral-8x7B-v0.1", "H100", 4, 1, "FP16", False, 0.9, 2048,
        ((37.66, 2569.97), (36.77, 2891.33))),
    Run("32-mixtral-8x7b-tp2-general-2-2", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 2, "FP16", False, 0.9, 2048,
        ((54.02, 4430.81), (57.75, 4951.71))),
    Run("56-mixtral-8x7b-tp2-general-2-1", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 1, "FP16", False, 0.9, 2048,
        ((63.69, 4810.86), (62.6, 5122.89))),
    Run("42-mixtral-8x7b-tp2-general-2", "mistralai/Mixtral-8x7B-v0.1", "A100-80GB", 2, 1, "FP16", False, 0.9,
        2048, ((110.69, 9053.66), (146722.47, 156526.49))),
    Run("49-mixtral-8x22b-tp8-general-8", "mistralai/Mixtral-8x22B-Instruct-v0.1", "H100", 8, 1, "FP16", False,
        0.9, 2048, ((63.93, 4477.56), (61.01, 4964.81))),
    Run("50-mixtral-8x22b-tp8-codegen-8", "mistralai/Mixtral-8x22B-Instruct-v0.1", "H100", 8, 1, "FP16", False,
        0.9, 2048, ((68.19, 4501.28), (53.16, 4419.93))),
    Run("51-mixtral-8x22b-tp8-roleplay-8", "mistralai/Mixtral-8x22B-Instruct-v0.1", "H100", 8, 1, "FP16", False,
        0.9, 2048, ((57.69, 4509.58),)),
    Run("53-mixtral-8x22b-tp8-reasoning-8", "mistralai/Mixtral-8x22B-Instruct-v0.1", "H100", 8, 1, "FP16", False,
        0.9, 2048, ((939.63, 30969.62),)),
    Run("20-llama-4-scout-17b-16e-tp2-codegen-2", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "H100",
        2, None, "FP8", None, None, 2048, ((65.22, 5391.0), (76.63, 6661.96))),
    Run("21-llama-4-scout-17b-16e-tp2-roleplay-2", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "H100",
        2, None, "FP8", None, None, 2048, ((67.03, 5803.83),)),
    Run("61-llama-3-1-70b-tp4-codegen-4-1", "meta-llama/Llama-3.1-70B-Instruct", "H100", 4, None, "FP16", None,
        None, 2048, ((54.74, 4494.73), (59.8, 5013.71))),
    Run("63-mistral-nemo-12b-tp1-codegen-1-1", "mistralai/Mistral-Nemo-Instruct-2407", "H100", 1, None, "FP16",
        None, None, 2048, ((31.9, 2449.78), (33.73, 2627.9))),
    Run("64-qwen2-5-7b-instruct-tp1-roleplay-1-1", "Qwen/Qwen2.5-7B-Instruct", "H100", 1, None, "FP16", None,
        None, 2048, ((26.72, 1771.8),)),
    # general-lite: stage rates not published (--lite-rates).
    Run("59-qwen3-14b-tp1-general-lite-1-1", "Qwen/Qwen3-14B", "H100", 1, None, "FP16", False, 0.9, 2048,
        ((38.14, 3017.58), (39.21, 3206.5))),
    Run("58-llama-2-70b-tp4-general-lite-4-1", "meta-llama/Llama-2-70b-hf", "H100", 4, None, "FP16", False, 0.9,
        2048, ((49.87, 4096.77), (51.35, 4394.57))),
    Run("27-mixtral-8x7b-tp2-general-lite-2-1", "mistralai/Mixtral-8x7B-v0.1", "H100", 2, 1, "FP16", False, 0.9,
        1024, ((56.3, 4055.06), (53.34, 4616.57))),
    Run("17-llama-4-scout-17b-16e-tp2-general-lite-2-1", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        "H100", 2, None, "FP8", None, None, 2048, ((57.8, 4460.33), (64.8, 5607.49))),
    Run("60-llama-3-1-70b-tp4-general-lite-4-1", "meta-llama/Llama-3.1-70B-Instruct", "H100", 4, None, "FP16",
        None, None, 8192, ((51.96, 4207.9), (54.43, 4624.55))),
    Run("62-mistral-nemo-12b-tp2-general-lite-2-1", "mistralai/Mistral-Nemo-Instruct-2407", "H100", 2, None,
        "FP16", None, None, 1024, ((22.0, 1497.47), (21.56, 1549.27))),
    Run("65-01-ai-yi-34b-tp2-general-lite-2-1", "01-ai/Yi-34B", "H100", 2, None, "FP16", None, None, 2048,
        ((46.65, 3780.22), (47.12, 3939.48))),
    Run("36-qwen3-14b-tp1-general-lite-1", "Qwen/Qwen3-14B", "A100-80GB", 1, None, "FP16", False, 0.9, 2048,
        ((72.24, 5644.49), (90.51, 7400.89))),
    Run("38-llama-3-1-8b-tp1-general-lite-1-1", "meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", 1, None, "FP16",
        False, 0.9, 2048, ((42.21, 3067.3), (45.95, 3619.85))),
    Run("40-codellama-34b-tp2-general-lite-2", "codellama/CodeLlama-34b-Instruct-hf", "A100-80GB", 2, None, "FP16",
        False, 0.9, 2048, ((82.22, 6588.62), (89.18, 7271.83))),
    Run("41-llama-2-70b-tp4-general-lite-4", "meta-llama/Llama-2-70b-hf", "A100-80GB", 4, None, "FP16", False,
        0.9, 2048, ((98.94, 8033.82), (112.72, 9444.74))),
    Run("54-qwen3-14b-tp1-general-lite-1", "Qwen/Qwen3-14B", "L40S", 1, None, "FP16", False, 0.9, 2048,
        ((140.63, 12401.27), (542.99, 17993.99))),
    Run("55-llama-3-1-8b-tp1-general-lite-1", "meta-llama/Llama-3.1-8B-Instruct", "L40S", 1, None, "FP16", False,
        0.9, 2048, ((74.07, 6337.54), (90.14, 7937.85))),
)


def build_folder(run: Run, root: Path, lite_rates: Optional[tuple[float, float]]) -> Path:
    """The run as the collection lays it out: ``root/experiments.json`` (one entry) and
    ``root/<name>/`` with the template workload's profile and the run's exp-config.yaml."""
    base = run.workload.removesuffix("-lite")
    template = SHARED_RUNS / TEMPLATES[base]
    folder = root / run.name
    shutil.copytree(template, folder)
    exp = (template / "exp-config.yaml").read_text()
    exp = re.sub(r"(?m)^model:.*$", f"model: {run.model}", exp)
    exp = re.sub(r"(?m)^tensor_parallelism:.*$", f"tensor_parallelism: {run.tp}", exp)
    exp = re.sub(r"(?m)^max_num_batched_tokens:.*$", f"max_num_batched_tokens: {run.mbt}", exp)
    (folder / "exp-config.yaml").write_text(exp)
    if run.workload.endswith("-lite"):
        assert lite_rates is not None
        _set_rates(folder, lite_rates)
    entry = {"id": run.id, "model": run.model, "precision": run.precision, "hw": run.hw, "workload": base,
             "mbt": run.mbt, "tp": run.tp, "dp": run.dp}
    if run.cpu_offload is not None:
        entry["cpu_offload"] = run.cpu_offload
    if run.gpu_mem is not None:
        entry["gpu_mem"] = run.gpu_mem
    (root / "experiments.json").write_text(json.dumps([entry], indent=1))
    return folder


def _set_rates(folder: Path, rates: tuple[float, float]) -> None:
    """Both stage rates in profile.yaml (JSON text) and results/config.yaml (YAML)."""
    import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

    for path in (folder / "profile.yaml", folder / "results" / "config.yaml"):
        doc = yaml.safe_load(path.read_text())
        stages = doc["load"]["stages"]
        if len(stages) != len(rates):
            raise SystemExit(f"{path}: {len(stages)} stages, --lite-rates gives {len(rates)}")
        for stage, rate in zip(stages, rates):
            stage["rate"] = rate
        path.write_text(yaml.safe_dump(doc))


def score(run: Run, predicted: list[dict]) -> list[dict]:
    out_len = OUTPUT_LEN[run.workload.removesuffix("-lite")]
    rows = []
    for i, ((ttft, e2e), p) in enumerate(zip(run.stages, predicted)):
        real_tpot = (e2e - ttft) / (out_len - 1)
        row = {"run": run.name, "stage": i, "hw": run.hw, "workload": run.workload,
               "overloaded_real": queued_by_means(ttft, e2e), "overloaded_predicted": p["overloaded"]}
        for name, real, pred in (("mean_ttft_ms", ttft, p["mean_ttft_ms"]), ("mean_e2el_ms", e2e, p["mean_e2el_ms"]),
                                 ("mean_tpot_ms", real_tpot, p["mean_tpot_ms"])):
            row[name] = {"real": real, "predicted": pred,
                         "error": None if pred is None else (pred - real) / real}
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lite-rates", default=None,
                    help="R0,R1: assume the general-lite workload ran its two stages at these rates (req/s)")
    ap.add_argument("--only", default=None, help="runs whose name contains this text")
    ap.add_argument("--stage-seconds", type=float, default=None, help="simulate at most this much of each stage")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source", default="auto", choices=("auto", "roofline", "operator_tables"),
                    help="the step pricer (cost_model.source; roofline: what prices without the tables)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default benchmarks/results/public_vllm_runs.json (_lite.json with --lite-rates, "
                         "_roofline before .json with --source roofline)")
    args = ap.parse_args(argv)
    if not SHARED_RUNS.is_dir():
        print(f"{SHARED_RUNS}: not found (the shared runs lend each workload's profile)", file=sys.stderr)
        return 2
    lite: Optional[tuple[float, float]] = None
    if args.lite_rates:
        try:
            rates = tuple(float(x) for x in args.lite_rates.split(","))
        except ValueError:
            print(f"--lite-rates: expected R0,R1 (req/s), got {args.lite_rates!r}", file=sys.stderr)
            return 2
        if len(rates) != 2 or min(rates) <= 0:
            print(f"--lite-rates: expected two positive rates, got {args.lite_rates!r}", file=sys.stderr)
            return 2
        lite = (rates[0], rates[1])
    runs = [r for r in RUNS if (lite is not None or not r.workload.endswith("-lite"))
            and (args.only is None or args.only in r.name)]
    rows, runs_out, skipped = [], [], []
    t_all = time.perf_counter()
    for run in runs:
        with tempfile.TemporaryDirectory() as tmp:
            folder = build_folder(run, Path(tmp) / "ground_truth", lite)
            t0 = time.perf_counter()
            try:
                cmp = compare_run(read_run(folder), overrides=[f"engine.version={VERSION}"], seed=args.seed,
                                  stage_seconds=args.stage_seconds, cost_source=args.source)
            except KvplanError as exc:
                skipped.append({"run": run.name, "reason": str(exc)})
                print(f"{run.name}: skipped: {exc}", file=sys.stderr)
                continue
            wall = time.perf_counter() - t0
        src = cmp.source()
        predicted = [{"overloaded": sc.overloaded_predicted, **{m: sc.predicted.get(m) for m in
                      ("mean_ttft_ms", "mean_e2el_ms", "mean_tpot_ms")}} for sc in cmp.stages]
        rows += score(run, predicted)
        runs_out.append({"run": run.name, "model": run.model, "hw": run.hw, "tp": run.tp, "dp": run.dp,
                         "mbt": run.mbt, "pricer": src["pricer"], "pricer_description": src["pricer_description"],
                         "wall_seconds": round(wall, 2), "notes": src["notes"]})
        print(f"{run.name}: {wall:.1f} s", file=sys.stderr)
    result = {"benchmark": "benchmarks/public_vllm_runs.py", "measured": SOURCE, "engine_version": VERSION,
              "lite_rates": lite, "source": args.source, "templates": TEMPLATES,
              "overloaded_real_if": "mean TTFT > 1 s and > half the mean E2E (calibration.validate_real.queued_by_means)",
              "summary": summarise(rows), "elapsed_s": round(time.perf_counter() - t_all, 1),
              "runs": runs_out, "stages": rows, "skipped": skipped}
    suffix = "" if args.source == "auto" else f"_{args.source}"
    out = args.out or ROOT / "benchmarks" / "results" / (
        f"public_vllm_runs_lite{suffix}.json" if lite else f"public_vllm_runs{suffix}.json")
    if args.only is None or args.out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}", file=sys.stderr)
    print(markdown(result))
    return 0


def summarise(rows: list[dict]) -> dict:
    """MAPE and signed mean error per metric over the stages not overloaded for real, overall and
    per GPU; overload detection over the rest."""
    def block(sel: list[dict]) -> dict:
        scored = [r for r in sel if not r["overloaded_real"]]
        out: dict = {"stages": len(scored)}
        for m in ("mean_ttft_ms", "mean_e2el_ms", "mean_tpot_ms"):
            errs = [r[m]["error"] for r in scored if r[m]["error"] is not None]
            out[m] = {"mape": statistics.fmean(abs(e) for e in errs) if errs else None,
                      "bias": statistics.fmean(errs) if errs else None}
        over = [r for r in sel if r["overloaded_real"]]
        out["overloaded_real"] = len(over)
        out["overload_predicted"] = sum(r["overloaded_predicted"] for r in over)
        out["false_overload"] = [f"{r['run']} stage {r['stage']}" for r in scored if r["overloaded_predicted"]]
        return out

    return {"all": block(rows), **{hw: block([r for r in rows if r["hw"] == hw])
                                   for hw in sorted({r["hw"] for r in rows})}}


def markdown(res: dict) -> str:
    def pct(x: Optional[float]) -> str:
        return "-" if x is None else f"{x * 100:+.1f}%"

    lines = ["| run | stage | real TTFT | pred | err | real E2E | pred | err | TPOT err |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["stages"]:
        t, e, p = r["mean_ttft_ms"], r["mean_e2el_ms"], r["mean_tpot_ms"]
        flag = " (overloaded: " + ("predicted" if r["overloaded_predicted"] else "NOT predicted") + ")" \
            if r["overloaded_real"] else (" (overload predicted)" if r["overloaded_predicted"] else "")
        lines.append(f"| {r['run']}{flag} | {r['stage']} | {t['real']:,.1f} | {_ms(t['predicted'])} | "
                     f"{pct(t['error'])} | {e['real']:,.0f} | {_ms(e['predicted'], 0)} | {pct(e['error'])} | "
                     f"{pct(p['error'])} |")
    lines += ["", "| GPU | stages scored | TTFT MAPE (bias) | E2E MAPE (bias) | TPOT MAPE (bias) | overloads predicted |",
              "|---|---:|---|---|---|---:|"]
    for key, b in res["summary"].items():
        cells = [f"{b[m]['mape'] * 100:.1f}% ({b[m]['bias'] * 100:+.1f}%)" if b[m]["mape"] is not None else "-"
                 for m in ("mean_ttft_ms", "mean_e2el_ms", "mean_tpot_ms")]
        lines.append(f"| {key} | {b['stages']} | {' | '.join(cells)} | "
                     f"{b['overload_predicted']}/{b['overloaded_real']} |")
    if res["lite_rates"]:
        lines.append(f"\ngeneral-lite stages replayed at {res['lite_rates'][0]:g} then {res['lite_rates'][1]:g} req/s "
                     f"(assumed: the collection documents a 6 req/s peak, not the first stage)")
    return "\n".join(lines)


def _ms(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
