"""Workloads: who arrives when, with how many prompt and output tokens, sharing which prefix.

The first stage of the request path (workload -> router -> scheduler -> executor -> metrics).
``build_requests`` turns the config's ``workload`` section into sorted ``Request`` objects;
the readers parse the public traces (Azure, Mooncake, ShareGPT/arXiv length tables).
See docs/workloads.md for every key.
"""

from sim.workload.builder import build_requests
from sim.workload.clients import ClientGroup, clients_of
from sim.workload.config import WorkloadSpec, parse_workload
from sim.workload.presets import sharegpt_like
from sim.workload.sessions import SessionLinks, SessionRequests
from sim.workload.summary import describe
from sim.workload.traces import (
    Trace,
    detect_format,
    read_azure,
    read_length_table,
    read_mooncake,
    read_trace,
)

__all__ = [
    "ClientGroup",
    "Trace",
    "SessionLinks",
    "SessionRequests",
    "WorkloadSpec",
    "build_requests",
    "clients_of",
    "describe",
    "detect_format",
    "parse_workload",
    "read_azure",
    "read_length_table",
    "read_mooncake",
    "read_trace",
    "sharegpt_like",
]
