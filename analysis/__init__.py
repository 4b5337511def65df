"""Answers built from many simulations: capacity search, A/B experiments, sweeps with their
Pareto frontier, and reports. Each module has one job; the CLI (``kvplan/cli/analysis.py``) and the
dashboard (``dashboards/``) call the same functions, so both give the same numbers.

Results are plain dictionaries (``to_dict``) with a ``kind`` field, so that they round-trip
through JSON and a report can be rendered later from saved files.
"""
