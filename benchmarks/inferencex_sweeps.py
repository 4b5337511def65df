"""Which points InferenceX's single-node sweep ran, by date: the concurrency each config's search
space reached for each ISL / OSL pair.

Why: the CSV's collections hold InferenceX-shaped rows (its three ISL / OSL pairs) that its sweep
did not run. ``.github/configs/nvidia-master.yaml`` (SemiAnalysisAI/InferenceX) lists, for each
``<model>-<precision>-<gpu>-<framework>`` config, the search space its single-node workflow swept:
DeepSeek-R1 FP8 on B200 with SGLang went to 64 clients at 1k / 1k and 32 at 8k / 1k, yet the
CSV holds rows of that deployment at 128-512 clients, whose measurements (TPOT 69 ms at 512
clients, where the script's ``--max-running-requests 128`` would have held it near 25 ms and
queued the rest for tens of seconds) say another harness's server measured them. The script's
flags (``inferencex_vllm_flags``, ``inferencex_sglang_flags``) belong to the rows its sweep ran;
a row outside it is replayed with the release's defaults.

``SWEEPS`` was read off the yaml's history (``git log --first-parent`` of main, UTC commit
dates; every commit that changed a config's caps, from the file's creation on 2025-11-03 to
``TABULATED_UNTIL``; trt, mtp, dynamo, agentic and multi-node configs left out): per config, the
versions ``(from_date, commit, ((isl, osl, max clients), ...))``, the maximum ``conc-end`` over
the search spaces of that ISL / OSL pair (any TP, EP, DP attention). A version is in force from
its commit's day on; on the day of a change, the versions before and after it both count
(``sweep_cap``: the rows carry days, not times).

``SPEC_DECODE_RUNS`` covers the ``-mtp`` configs: where one ran an image or a point its base config
did not, the rows with that image at that point were measured with speculative decoding, which
the CSV does not record (``spec_decode_run``). Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: The yaml's history is tabulated up to (not including) this day; 2026-05-01 (b7ae44045)
#: restructured the configs, after every measured row.
TABULATED_UNTIL = "2026-05-01"

#: The yaml's creation: no sweep record before it (the sweeps were in workflow files).
FIRST_RECORD = "2025-11-03"

#: ``model_path`` substring (lower case) -> the configs' model prefix.
MODEL_PREFIXES = (("deepseek", "dsr1"), ("minimax-m2.5", "minimaxm2.5"), ("kimi-k2.5", "kimik2.5"),
                  ("gpt-oss", "gptoss"), ("qwen3.5", "qwen3.5"), ("glm-5", "glm5"),
                  ("llama-3.1-70b", "llama70b"), ("llama-3.3-70b", "llama70b"))

Caps = tuple[tuple[int, int, int], ...]

SWEEPS: dict[str, tuple[tuple[str, str, Optional[Caps]], ...]] = {
    'dsr1-fp4-b200-sglang': (
        ('2025-11-03', '17d5e204f', ((1024, 1024, 128), (1024, 8192, 128), (8192, 1024, 128))),
        ('2026-03-28', '626932a11', ((1024, 1024, 128), (8192, 1024, 128))),
    ),
    'dsr1-fp4-b300-sglang': (
        ('2026-04-17', '9ebeafb4e', ((1024, 1024, 128), (8192, 1024, 128))),
    ),
    'dsr1-fp8-b200-sglang': (
        ('2025-11-03', '17d5e204f', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-01-13', '1d29967c4', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 32))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 32))),
    ),
    'dsr1-fp8-b300-sglang': (
        ('2026-04-17', '5b302f147', ((1024, 1024, 64), (8192, 1024, 32))),
    ),
    'dsr1-fp8-h200-sglang': (
        ('2025-11-03', '17d5e204f', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'glm5-fp4-b200-sglang': (
        ('2026-04-02', '800f57aaf', ((1024, 1024, 64), (8192, 1024, 64))),
        ('2026-04-09', '475cc1dbc', ((1024, 1024, 256), (8192, 1024, 256))),
    ),
    'glm5-fp4-b300-sglang': (
        ('2026-04-17', '37120e65c', ((1024, 1024, 256), (8192, 1024, 256))),
    ),
    'glm5-fp8-b200-sglang': (
        ('2026-03-20', '13930ca61', ((1024, 1024, 128), (1024, 8192, 128), (8192, 1024, 128))),
        ('2026-03-28', '626932a11', ((1024, 1024, 128), (8192, 1024, 128))),
        ('2026-04-14', '8f1e330f9', ((1024, 1024, 256), (8192, 1024, 256))),
    ),
    'glm5-fp8-b300-sglang': (
        ('2026-04-17', '6c66a00d9', ((1024, 1024, 256), (8192, 1024, 256))),
    ),
    'glm5-fp8-h200-sglang': (
        ('2026-03-19', 'ebb48d4bc', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'glm5-nvfp4-b200-sglang': (
        ('2026-03-29', 'd43805fc3', ((1024, 1024, 64), (8192, 1024, 64))),
        ('2026-04-02', '800f57aaf', None),
    ),
    'gptoss-fp4-b200-vllm': (
        ('2025-11-03', '17d5e204f', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2025-11-10', '7daaa8bb3', ((1024, 1024, 128), (1024, 8192, 128), (8192, 1024, 128))),
        ('2026-03-28', '626932a11', ((1024, 1024, 128), (8192, 1024, 128))),
    ),
    'gptoss-fp4-h100-vllm': (
        ('2025-11-03', '17d5e204f', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-25', 'c674b81dd', ((1024, 1024, 4),)),
        ('2026-03-25', '77d376b86', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'gptoss-fp4-h200-vllm': (
        ('2025-11-03', '17d5e204f', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'kimik2.5-fp4-b200-vllm': (
        ('2026-03-11', 'a58dedd5a', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'kimik2.5-fp4-b300-vllm': (
        ('2026-04-17', 'a35e53694', ((1024, 1024, 64), (8192, 1024, 64))),
        ('2026-04-20', '13d527ab9', None),
        ('2026-04-20', 'f34a83b25', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'kimik2.5-int4-b200-vllm': (
        ('2026-02-24', 'eb02101ef', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'kimik2.5-int4-b300-vllm': (
        ('2026-04-17', '6e89e55b0', ((1024, 1024, 64), (8192, 1024, 64))),
        ('2026-04-17', 'dd9c285b3', None),
    ),
    'kimik2.5-int4-h200-vllm': (
        ('2026-03-02', '70072ef5b', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-02', '1c5c8b45c', None),
        ('2026-03-02', '749096c4c', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'minimaxm2.5-fp4-b200-vllm': (
        ('2026-04-08', '79bd988e9', ((1024, 1024, 512), (8192, 1024, 512))),
        ('2026-04-22', '13962fcfa', ((1024, 1024, 1024), (8192, 1024, 512))),
    ),
    'minimaxm2.5-fp4-b300-vllm': (
        ('2026-04-17', '22d0f12f7', ((1024, 1024, 512), (8192, 1024, 512))),
        ('2026-04-21', '633fd2377', ((1024, 1024, 2048), (8192, 1024, 512))),
    ),
    'minimaxm2.5-fp8-b200-vllm': (
        ('2026-03-11', 'f342df18e', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
        ('2026-04-03', 'bddbf4031', ((1024, 1024, 512), (8192, 1024, 256))),
        ('2026-04-08', '5d037dd4a', ((1024, 1024, 512), (8192, 1024, 512))),
    ),
    'minimaxm2.5-fp8-b300-vllm': (
        ('2026-04-17', '340d7854c', ((1024, 1024, 512), (8192, 1024, 512))),
        ('2026-04-21', '0c2467c15', ((1024, 1024, 1024), (8192, 1024, 256))),
    ),
    'minimaxm2.5-fp8-h100-vllm': (
        ('2026-03-03', 'ac0d2a853', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'minimaxm2.5-fp8-h200-vllm': (
        ('2026-03-01', 'a36346339', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-13', '5e2c705d3', ((1024, 1024, 128), (1024, 8192, 128), (8192, 1024, 128))),
        ('2026-03-28', '626932a11', ((1024, 1024, 128), (8192, 1024, 128))),
    ),
    'qwen3.5-bf16-b200-sglang': (
        ('2026-02-17', '521d19951', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'qwen3.5-bf16-b300-sglang': (
        ('2026-04-18', '77c8b9657', ((1024, 1024, 64), (8192, 1024, 64))),
        ('2026-04-18', '47e63d5b6', None),
        ('2026-04-18', '32274d6c1', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
    'qwen3.5-fp4-b200-sglang': (
        ('2026-04-08', '48d35c480', ((1024, 1024, 128), (8192, 1024, 128))),
    ),
    'qwen3.5-fp4-b300-sglang': (
        ('2026-04-18', '8acbd08b7', ((1024, 1024, 128), (8192, 1024, 128))),
    ),
    'qwen3.5-fp8-b200-sglang': (
        ('2026-03-03', 'efd49e50b', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-24', '6a5dad463', ((1024, 1024, 128), (1024, 8192, 128), (8192, 1024, 128))),
        ('2026-03-28', '626932a11', ((1024, 1024, 128), (8192, 1024, 128))),
        ('2026-04-30', '515294190', ((1024, 1024, 256), (8192, 1024, 256))),
    ),
    'qwen3.5-fp8-b300-sglang': (
        ('2026-04-17', 'c0f62a2ef', ((1024, 1024, 256), (8192, 1024, 256))),
    ),
    'qwen3.5-fp8-h200-sglang': (
        ('2026-03-04', 'f65d6b4b1', ((1024, 1024, 64), (1024, 8192, 64), (8192, 1024, 64))),
        ('2026-03-28', '626932a11', ((1024, 1024, 64), (8192, 1024, 64))),
    ),
}


def config_key(model_path: str, precision: str, system: str, backend: str) -> Optional[str]:
    """The yaml's config name for a row (``dsr1-fp8-b200-sglang``), None for a model the sweep
    does not cover."""
    low = model_path.lower()
    prefix = next((p for needle, p in MODEL_PREFIXES if needle in low), None)
    if prefix is None:
        return None
    return f"{prefix}-{precision.lower()}-{system.lower().removesuffix('_sxm')}-{backend.lower()}"


def sweep_cap(key: str, measured: str, isl: int, osl: int) -> Optional[tuple[int, str]]:
    """(the most clients the sweep of ``key`` ran at ``isl`` / ``osl`` on ``measured``, the yaml
    commit that allowed it): 0 when the pair was not in its search space; None when there is no
    record (before the yaml, after ``TABULATED_UNTIL``, or a config never listed by then).

    ``SWEEPS`` has days, not times, and the CSV's later collections stamp rows with a day
    (``measured=2026-03-28T00:00:00.000Z``). On a day the yaml changed, the version before the
    change and the one after were both in force for part of it, so a row of that day may have
    run under either: the larger reach of the two counts. (626932a11 dropped every 1k / 8k
    point at 06:38 UTC on 2026-03-28; the CSV's rows of that point stamped that day measure
    what the earlier version's runs did, e.g. MiniMax-M2.5 FP8 on H100 at 64 clients 20.07 s
    TTFT against 20.03 s on 2026-03-27.)"""
    if not (FIRST_RECORD <= measured < TABULATED_UNTIL):
        return None
    before: Optional[tuple[str, Optional[Caps]]] = None
    that_day: list[tuple[str, Optional[Caps]]] = []
    for from_date, commit, caps in SWEEPS.get(key, ()):
        if from_date < measured:
            before = (commit, caps)
        elif from_date == measured:
            that_day.append((commit, caps))
    in_force = ([before] if before else []) + that_day
    if not in_force:
        return None
    reach = [(max((n for i, o, n in caps if (i, o) == (isl, osl)), default=0) if caps else 0, commit)
             for commit, caps in in_force]
    best = max(n for n, _ in reach)
    # The commit that allowed the most; when none ran the point, the day's last version.
    return best, next(c for n, c in reversed(reach) if n == best)


def outside_sweep(model_path: str, precision: str, system: str, backend: str, measured: Optional[str],
                  isl: int, osl: int, clients: int) -> Optional[str]:
    """Why a row is outside InferenceX's sweep on its measured date (one line), or None when it
    is inside or no record says either way."""
    key = config_key(model_path, precision, system, backend)
    if key is None or not measured:
        return None
    found = sweep_cap(key, measured, isl, osl)
    if found is None:
        return None
    cap, commit = found
    if clients <= cap:
        return None
    reach = f"went to {cap} clients" if cap else "did not run it"
    return (f"outside InferenceX's sweep: {key} at {isl}/{osl} {reach} on {measured} "
            f"(.github/configs/nvidia-master.yaml @ {commit}), so not its run: release defaults, "
            f"no script flags")


# ---------------------------------------------------------------------------------------------
# Speculative-decoding (MTP) configs: rows their runs measured.
# ---------------------------------------------------------------------------------------------

#: A sweep point: (ISL, OSL, TP, EP, most clients).
SweepPoint = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class SpecDecodeRun:
    """One of InferenceX's ``<config>-mtp`` configs over a span of days: the same model, GPU and
    precision as ``base``, run with EAGLE / MTP speculative decoding, filed in the CSV under the
    base's labels (nothing in a row names the speculation). ``image`` and ``points`` are the MTP
    config's over the span; ``base_points`` the base config's where it ran the same image (empty:
    its image differed on every day of the span, so the image alone tells them apart)."""

    base: str
    mtp: str
    start: str
    end: str
    image: str
    points: tuple[SweepPoint, ...]
    base_points: tuple[SweepPoint, ...]
    source: str
    what: str


def _covers(points: tuple[SweepPoint, ...], isl: int, osl: int, tp: int, ep: int, clients: int) -> bool:
    return any((i, o, t, e) == (isl, osl, tp, ep) and clients <= n for i, o, t, e, n in points)


#: Read off the yaml's history as ``SWEEPS`` was (UTC commit days). qwen3.5-fp8-b200: from the
#: MTP config's first commit (35d4bb367, 2026-03-20 22:08 UTC) until the base config moved to TP 4
#: x EP 1 on a nightly image (515294190, 2026-04-30); the base ran ``v0.5.9-cu129-amd64``, then
#: ``v0.5.9-cu130-amd64`` (6a5dad463), never the MTP config's ``v0.5.9-cu130``, and TP 8 x EP 1 /
#: TP 4 x EP 4 only. dsr1-fp8-b200: from 12ba0ae07 (2026-03-25) both configs ran
#: ``v0.5.9-cu130`` at TP 8 x EP 1 (the base also TP 4 at 8k / 1k), the MTP config to 512
#: clients, the base to 64 (4 at 8k / 1k on TP 8): points the base did not run are the MTP
#: config's; at the others the CSV holds twin rows of one label (both runs filed, 43 rows), and
#: nothing says which twin is which, so both are skipped as either. Not listed: qwen3.5-fp8-b300:
#: the MTP config (28752f613, 2026-04-16 23:06 UTC) and the base (c0f62a2ef, 2026-04-17 03:20)
#: share image and layout, but the CSV's rows of those points are one run a point: the database
#: dump's workflow run 747, stamped 2026-04-17. The dump's B300 runs 747, 748, 749 (Qwen3.5 FP8,
#: DeepSeek-R1 FP4, FP8) and 765, 766 (Qwen3.5 FP4, BF16) follow the order in which the base
#: configs were merged (#1048-#1050 on 04-17 03:20-05:57 UTC, #1072 and #1081 at 21:22 and 21:52),
#: not the -mtp twins' (#1035 on 04-16, #1059 at 07:26, #1082 BF16 before #1083 FP4): they stay
#: replayed as the bases. The other -mtp twins (GLM-5, Qwen3.5 BF16 / FP4 on B200, Qwen3.5 FP8 on
#: H200 from 2026-04-06) start after every row of their base's points; earlier spans' images
#: appear in no row.
SPEC_DECODE_RUNS: tuple[SpecDecodeRun, ...] = (
    SpecDecodeRun(
        "qwen3.5-fp8-b200-sglang", "qwen3.5-fp8-b200-sglang-mtp", "2026-03-20", "2026-04-29",
        "lmsysorg/sglang:v0.5.9-cu130",
        ((1024, 1024, 4, 1, 256), (1024, 8192, 4, 1, 256), (8192, 1024, 4, 1, 256)), (),
        ".github/configs/nvidia-master.yaml @ 35d4bb367 (#898), benchmarks/single_node/qwen3.5_fp8_b200_mtp.sh",
        "EAGLE speculative decoding (3 steps, 4 draft tokens, top-k 1), --max-running-requests CONC, "
        "--disable-radix-cache, --mamba-ssm-dtype bfloat16"),
    SpecDecodeRun(
        "dsr1-fp8-b200-sglang", "dsr1-fp8-b200-sglang-mtp", "2026-03-25", "2026-04-30",
        "lmsysorg/sglang:v0.5.9-cu130",
        ((1024, 1024, 8, 1, 512), (1024, 8192, 8, 1, 512), (8192, 1024, 8, 1, 512)),
        ((1024, 1024, 8, 1, 64), (1024, 8192, 8, 1, 64), (8192, 1024, 4, 1, 32), (8192, 1024, 8, 1, 4)),
        ".github/configs/nvidia-master.yaml @ 12ba0ae07",
        "MTP speculative decoding"),
)


#: How ``spec_decode_run`` begins its reason for a row either config may have measured.
EITHER_CONFIG = "base or speculative decoding"


def spec_decode_run(model_path: str, precision: str, system: str, backend: str, measured: Optional[str],
                    image: Optional[str], isl: int, osl: int, tp: int, ep: int, clients: int) -> Optional[str]:
    """Why a row was, or may have been, measured by one of InferenceX's speculative-decoding
    configs (one line), or None. On ``measured`` its MTP config ran this exact ``image`` at this
    point (ISL / OSL, TP x EP, clients) (``SPEC_DECODE_RUNS``): if its base config did not, the
    row is the MTP run; if the base ran the same image at the same point that day too, the
    reason begins with ``EITHER_CONFIG``: both runs are filed under the same labels (the CSV
    holds twin rows for such points) and nothing in a row says which it is, so it has no one
    deployment to replay. Decided from the row's labels, date and image alone."""
    key = config_key(model_path, precision, system, backend)
    if key is None or not measured or not image:
        return None
    for run in SPEC_DECODE_RUNS:
        if (run.base != key or not run.start <= measured <= run.end or image != run.image
                or not _covers(run.points, isl, osl, tp, ep, clients)):
            continue
        where = f"{image} at {isl}/{osl}, TP {tp} x EP {ep}, {clients} clients on {measured} ({run.source}: {run.what})"
        if _covers(run.base_points, isl, osl, tp, ep, clients):
            return (f"{EITHER_CONFIG}: {run.base} and {run.mtp} both ran {where}, filed under the same "
                    f"labels; the row does not say which run it is")
        why = ("the base config never ran that image" if not run.base_points
               else "the base config did not run that point")
        return (f"speculative decoding: {run.mtp} ran {where}; {why}. The drafts' acceptance on the "
                f"run is not recorded")
    return None
