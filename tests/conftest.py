"""Shared test setup.

Tests that pin simulator numbers were written against the roofline. ``cost_model.source:
auto`` prices with measured operator tables when the aiconfigurator-core package is installed,
so those numbers would depend on whether it is; pointing
``KVPLAN_GPU_TABLES`` at a folder that does not exist makes ``auto`` mean the roofline in every
test. Tests of the operator-table pricer pass ``cost_model.tables`` / ``tables=`` explicitly.
"""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _roofline_by_default(tmp_path_factory):
    """Session-wide, so module- and session-scoped fixtures (simulations shared by several
    tests) see it too, and worker processes (sweeps) inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KVPLAN_GPU_TABLES", str(tmp_path_factory.getbasetemp() / "no-gpu-tables"))
        yield


@pytest.fixture
def no_env(monkeypatch):
    """No ``KVPLAN_GPU_TABLES`` for one test: the default tables are the installed package's
    (or none, where it is absent)."""
    from sim.pricing import table_data

    monkeypatch.delenv(table_data.ENV_TABLES, raising=False)


@pytest.fixture
def installed_tables(monkeypatch):
    """The installed aiconfigurator-core tables for one test (the suite prices with the roofline
    by default); skipped where the package is absent."""
    from sim.pricing import table_data

    monkeypatch.delenv(table_data.ENV_TABLES, raising=False)
    if table_data.default_tables_root() is None:
        pytest.skip("aiconfigurator-core tables not installed")
