"""The step-cost menu says what it does: auto, operator tables, roofline and each profile, each
mapped to ``cost_model.source``; under it the pricer that will price the steps, its known error,
and an error (never a traceback) for operator tables on a GPU that has none."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboards.common import COST_AUTO, known_error_text  # noqa: E402
from sim.api import resolve_deployment  # noqa: E402
from sim.config import build_config  # noqa: E402

PAGES = Path(__file__).resolve().parents[2] / "dashboards" / "views"
MENU = "wi.cost_model.profile"


@pytest.fixture
def tables(monkeypatch):
    """The operator tables found where the planner looks by default (tests/conftest.py hides
    them from every other test); a test needing them skips where none cover h100-sxm."""
    monkeypatch.delenv("KVPLAN_GPU_TABLES", raising=False)
    if priced_by("h100-sxm") != "operator_tables":
        pytest.skip("no operator tables for h100-sxm here")


def priced_by(hardware: str) -> str:
    """The source ``auto`` resolves to on ``hardware`` (the tables may be absent here)."""
    dep = resolve_deployment(build_config({"hardware": hardware}))
    return dep.source if hasattr(dep, "source") else dep.cost_model_source


def what_if(**choices) -> AppTest:
    """The What-if page with a short run and the given sidebar select boxes set."""
    at = AppTest.from_file(str(PAGES / "what_if.py"), default_timeout=180)
    at.run()
    at.text_input(key="wi.curve.rates").set_value("4")
    at.sidebar.number_input(key="wi.workload.num_requests").set_value(50)
    for key, value in choices.items():
        at.sidebar.selectbox(key=f"wi.{key}").set_value(value)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def notes(at: AppTest) -> list[str]:
    return [c.value for c in at.sidebar.caption]


def test_menu_offers_auto_tables_roofline_and_each_profile():
    at = AppTest.from_file(str(PAGES / "what_if.py"), default_timeout=180)
    at.run()
    options = at.sidebar.selectbox(key=MENU).options
    assert options[:3] == [COST_AUTO, "operator tables", "roofline"]
    assert any(o.endswith("smollm2-135m_bf16_cpu.json") for o in options[3:])
    assert at.sidebar.selectbox(key=MENU).value == COST_AUTO  # the default is auto, as before


def test_roofline_is_described_as_the_roofline():
    at = what_if(**{"hardware": "h100-sxm", "cost_model.profile": "roofline"})
    said = notes(at)
    assert any(n.startswith("Priced by: roofline (llama-3.1-8b on h100-sxm") for n in said), said
    assert any(n.startswith("Known error:") and "docs/cost_model.md" in n
               and "h100-sxm's measured timings" in n and "gemm 8.3%" in n for n in said), said
    assert not any("fell back" in n for n in said)


def test_auto_on_h100_is_described_as_the_operator_tables(tables):
    at = what_if(hardware="h100-sxm")
    said = notes(at)
    assert any(n.startswith("Priced by: operator tables (AIConfigurator") and "h100_sxm" in n
               for n in said), said
    known = next(n for n in said if n.startswith("Known error:"))
    assert "GEMMs" in known and "decode attention" in known and "%" in known


def test_operator_tables_on_a_gpu_without_tables_is_an_error_under_the_menu(tables):
    at = what_if(**{"hardware": "a10g", "cost_model.profile": "operator tables"})
    said = [e.value for e in at.sidebar.error]
    assert any("a10g" in e and "operator tables" in e for e in said), said
    assert not any(n.startswith("Priced by:") for n in notes(at))
    assert "Fix the setting marked in red" in at.info[0].value


def test_auto_on_a_gpu_without_tables_says_it_fell_back(tables):
    at = what_if(hardware="a10g")
    said = notes(at)
    assert any(n.startswith("Priced by: roofline (llama-3.1-8b on a10g") for n in said), said
    assert any(n.startswith("auto fell back to the roofline: ") and "a10g" in n for n in said), said
    assert not at.sidebar.error


def test_a_profile_sets_the_profile_source():
    profile = next(o for o in AppTest.from_file(str(PAGES / "what_if.py")).run()
                   .sidebar.selectbox(key=MENU).options if o.endswith("smollm2-135m_bf16_cpu.json"))
    at = what_if(**{"model": "smollm2-135m", "cost_model.profile": profile})
    assert any(n == f"Priced by: profile {profile}" for n in notes(at)), notes(at)
    assert not at.sidebar.error


def test_known_error_reads_as_percentages():
    tables = {"gpu": "h100_sxm", "method": "leave-one-point-out",
              "gemm_mean_abs_pct": 5.25, "gemm_p90_abs_pct": 11.83,
              "decode_attention_mean_abs_pct": 2.96, "decode_attention_p90_abs_pct": 7.4,
              "step_vs_real": {"mean_e2el_mape": 0.022, "mean_tpot_mape": 0.0213,
                               "mean_ttft_mape": 0.2232, "runs": "16 vLLM 0.15.1 runs"}}
    text = known_error_text(tables, "operator_tables")
    assert "GEMMs 5.2% mean / 11.8% p90" in text or "GEMMs 5.3% mean / 11.8% p90" in text
    assert "decode attention 3.0% mean / 7.4% p90" in text
    assert "against real runs (16 vLLM 0.15.1 runs): mean error TPOT 2.1%, TTFT 22.3%, E2E 2.2%" in text
    text = known_error_text({**tables, "step_vs_real": None}, "operator_tables")
    assert "not measured on h100_sxm yet" in text
    fitted = {"profile": "p.json", "held_out_by": "model", "heldout_mape": 0.0516,
              "heldout_p90_ape": 0.1246, "heldout": {"mean_tpot_ms": 0.0315}}
    assert known_error_text(fitted, "profile").startswith("Known error: 5.2% mean, 12.5% p90")
    assert "docs/cost_model.md" in known_error_text(None, "roofline")


def test_cluster_page_has_the_same_menu(tables):
    """The Cluster page's shared sidebar: the same options, and the same error under the menu
    (set before the first run, so nothing is simulated)."""
    at = AppTest.from_file(str(PAGES / "cluster.py"), default_timeout=300)
    at.query_params["cl.tab"] = "Routing"
    at.session_state["cl.hardware"] = "a10g"
    at.session_state["cl.cost_model.profile"] = "operator tables"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.sidebar.selectbox(key="cl.cost_model.profile").options[:3] == [COST_AUTO, "operator tables", "roofline"]
    assert any("a10g" in e.value for e in at.sidebar.error)


def test_the_serving_engine_is_a_choice_on_the_what_if_page():
    sglang = what_if(**{"engine.name": "sglang"})
    assert sglang.sidebar.selectbox(key="wi.engine.name").options == ["vllm", "sglang"]
    assert not sglang.error, [e.value for e in sglang.error]
    vllm = what_if()
    tiles = lambda at: [(m.label, m.value) for m in at.metric]  # noqa: E731
    assert tiles(sglang) and tiles(sglang) != tiles(vllm)   # another scheduler served the requests


def test_moe_routing_and_activations_reach_the_pricer(tables):
    """The two MoE knobs are sidebar choices that change what prices the steps: the router the
    operator tables price, and MXFP4 experts' activations (an error, under its field, where the
    GPU has no FP8 x FP4 MoE kernels)."""
    at = what_if(**{"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "cost_model.moe_routing": "balanced"})
    assert at.sidebar.selectbox(key="wi.cost_model.moe_routing").options[0] == "uniform"
    assert any(n.startswith("Priced by: operator tables") and "balanced routing" in n
               for n in notes(at)), notes(at)
    at = what_if(**{"model": "gpt-oss-20b", "hardware": "h100-sxm",
                    "quantization.weights": "mxfp4", "quantization.moe_activations": "mxfp8"})
    said = [e.value for e in at.sidebar.error]
    assert any("quantization.moe_activations" in e and "Blackwell" in e for e in said), said
