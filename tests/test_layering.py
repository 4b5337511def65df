"""The import layering of docs/architecture.md, kept true.

The layer table in docs/architecture.md (between the ``layers:begin``/``layers:end`` markers) is
the one source: this test parses it and checks every import in the tree against it, lazy
imports inside functions included (they run up the layers just the same when called). A module
may import its own group and anything in a lower layer; groups on the same layer are siblings
and may not import each other (the simulator and the kernels know nothing of one another).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("sim", "runtime", "kernels", "calibration", "dashboards", "cli")
#: Third-party packages the lowest layers must not import (the policies run inside both
#: executors; the simulator's core must install without the heavy extras).
FORBIDDEN_THIRD_PARTY = {
    "sim.policies": {"simpy", "torch", "triton", "numpy", "scipy", "streamlit", "plotly", "pandas", "ray"},
    "sim.errors": {"simpy", "torch", "triton", "numpy", "scipy", "streamlit", "plotly", "pandas", "ray"},
}
HEAVY = {"torch", "triton", "streamlit", "plotly", "pandas", "ray", "transformers"}


def parse_layers(text: str) -> list[tuple[int, list[list[str]]]]:
    """[(rank, [group, ...])] with each group a list of module prefixes, from the doc's table
    rows ``| rank | name | prefixes; prefixes |``."""
    block = text.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    layers = []
    for line in block.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|[^|]*\|([^|]+)\|", line)
        if not m:
            continue
        groups = [[p.strip(" `") for p in g.split(",") if p.strip(" `")] for g in m.group(2).split(";")]
        layers.append((int(m.group(1)), groups))
    return layers


LAYERS = parse_layers(DOC.read_text())


def locate(module: str) -> tuple[int, int, str] | None:
    """(rank, group index, matched prefix) of the longest prefix naming ``module``."""
    best = None
    for rank, groups in LAYERS:
        for gi, group in enumerate(groups):
            for prefix in group:
                if module == prefix or module.startswith(prefix + "."):
                    if best is None or len(prefix) > len(best[2]):
                        best = (rank, gi, prefix)
    return best


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py"))


def imports_of(path: Path, me: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this module's package
                base = me.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from sim import config`` imports the submodule sim.config
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((node.lineno, sub if locate_exact_module(sub) else mod))
    return out


def locate_exact_module(name: str) -> bool:
    parts = name.split(".")
    p = ROOT.joinpath(*parts)
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def test_the_doc_has_a_layer_table():
    assert len(LAYERS) >= 6, "docs/architecture.md lost its layer table"
    ranks = [r for r, _ in LAYERS]
    assert ranks == sorted(ranks, reverse=True) or ranks == sorted(ranks)


def violations(path: Path, me: str) -> list[str]:
    """Every import of ``path`` (module ``me``) that runs up a layer or across to a sibling."""
    mine = locate(me)
    if mine is None:
        return [f"{me} is in no layer of docs/architecture.md: add it to the table"]
    bad = []
    for line, target in imports_of(path, me):
        top = target.split(".")[0]
        if top in PACKAGES:
            theirs = locate(target)
            if theirs is None:
                bad.append(f"{path.name}:{line} imports {target}, which is in no layer")
                continue
            same_group = theirs[0] == mine[0] and theirs[1] == mine[1]
            if not (same_group or theirs[0] < mine[0]):
                bad.append(f"{path.name}:{line} ({me}, layer {mine[0]}) imports "
                           f"{target} (layer {theirs[0]}{', a sibling' if theirs[0] == mine[0] else ''})")
        for prefix, banned in FORBIDDEN_THIRD_PARTY.items():
            if (me == prefix or me.startswith(prefix + ".")) and top in banned:
                bad.append(f"{path.name}:{line} ({me}) imports {top}")
    return bad


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_down_the_layers(path: Path):
    bad = violations(path, module_name(path))
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_simulator_core_imports_nothing_heavy():
    """The simulator's path (scenario -> workload -> policies -> simulation -> pricing ->
    metrics) must run on the light core install: no torch, streamlit, plotly, pandas, ray."""
    core = ("sim.policies", "sim.catalog", "sim.scenario", "sim.config", "sim.workload",
            "sim.simulation", "sim.api", "sim.pricing", "sim.memory_plan", "sim.metrics")
    bad = []
    for path in source_files():
        me = module_name(path)
        if not any(me == c or me.startswith(c + ".") for c in core):
            continue
        for line, target in imports_of(path, me):
            if target.split(".")[0] in HEAVY:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_the_checker_reports_violations(tmp_path):
    """The checker itself: a policy importing the simulator (up), the simulator importing a
    kernel (sibling), a lazy import of the runtime inside a function, and numpy in a policy
    are each reported; an import down the layers is not."""
    f = tmp_path / "fake.py"
    f.write_text("from sim.errors import ConfigError\n"
                 "import sim.simulation\n"
                 "import numpy\n"
                 "def later():\n"
                 "    from runtime import LLM\n")
    bad = violations(f, "sim.policies.fake")
    assert len(bad) == 3, bad
    assert any("sim.simulation" in b for b in bad) and any("runtime" in b for b in bad)
    assert any("numpy" in b for b in bad)
    g = tmp_path / "sibling.py"
    g.write_text("import kernels\nfrom sim.policies import StepPlan\n")
    bad = violations(g, "sim.simulation")
    assert len(bad) == 1 and "sibling" in bad[0], bad
    assert violations(g, "runtime.fake") == []
    assert violations(f, "nowhere.fake") and "no layer" in violations(f, "nowhere.fake")[0]


def sim_import_graph() -> dict[str, set[str]]:
    """module -> the ``sim`` modules it imports, lazy imports inside functions included (a lazy
    import only hides a cycle until the function runs)."""
    graph = {}
    for path in sorted((ROOT / "sim").rglob("*.py")):
        me = module_name(path)
        graph[me] = {t for _, t in imports_of(path, me) if t.startswith("sim.") and t != me}
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str]:
    """A chain of imports from ``start`` back to itself, or [] when there is none."""
    parent: dict[str, str] = {}
    stack, seen = [start], {start}
    while stack:
        here = stack.pop()
        for there in sorted(graph.get(here, ())):
            if there == start:
                chain = [here]
                while chain[-1] != start:
                    chain.append(parent[chain[-1]])
                return chain[::-1] + [start]
            if there not in seen:
                seen.add(there)
                parent[there] = here
                stack.append(there)
    return []


@pytest.mark.parametrize("module", ["sim.api", "sim.disaggregation", "sim.streaming"])
def test_the_simulator_front_ends_form_no_import_cycle(module):
    """sim.api runs the P/D simulator (sim.disaggregation) and the streaming recorder
    (sim.streaming); the pieces all three need live below them (sim.run_parts, sim.results),
    so neither imports sim.api back, not even inside a function."""
    chain = cycle_through(sim_import_graph(), module)
    assert not chain, "import cycle: " + " -> ".join(chain)


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert cycle_through(graph, "a") == ["a", "b", "c", "a"]
    assert cycle_through(graph, "d") == []
    assert cycle_through({"a": {"a"}}, "a") == ["a", "a"]
