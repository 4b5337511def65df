"""KV-transfer links between a prefill and a decode instance (disaggregated serving): the
per-GPU bandwidth one direction of a transfer gets, and the latency of one transfer.

Bandwidths are per GPU and per direction: a KV transfer is one-way, and every GPU of the
sending instance moves its own KV shard over its own link (GPUDirect RDMA, one NIC per GPU
in a DGX/HGX H100), so an instance of ``tp`` GPUs moves ``min(tp_prefill, tp_decode)`` times
this (``sim.policies.kv_transfer``). Latencies are one transfer's fixed cost: wire and switch
latency plus the connector's handshake (NIXL/UCX read request and completion notification),
which dominates; override both with ``disaggregation.link_bandwidth_gbs`` / ``link_latency_us``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.catalog.hardware import GB
from sim.errors import ConfigError


@dataclass(frozen=True)
class LinkSpec:
    """One kind of link: ``bandwidth`` bytes/s per GPU and direction, ``latency`` seconds per
    transfer."""

    name: str
    bandwidth: float
    latency: float
    description: str


LINKS: dict[str, LinkSpec] = {
    # NVLink 4 (H100 SXM, NVSwitch): 18 links x 50 GB/s = 900 GB/s per GPU in both directions
    # together, 450 GB/s each way (NVIDIA H100 datasheet; DGX H100 user guide). Prefill and
    # decode instances inside one NVLink domain (one HGX node, or an NVL72 rack).
    "nvlink": LinkSpec("nvlink", 450 * GB, 5e-6,
                       "NVLink 4 via NVSwitch: 900 GB/s per H100 bidirectional, 450 GB/s one way"),
    # InfiniBand NDR: ConnectX-7 at 400 Gb/s = 50 GB/s per NIC, one NIC per GPU in a DGX H100
    # (NVIDIA ConnectX-7 datasheet; DGX H100 has 8 single-port ConnectX-7 for compute).
    "infiniband": LinkSpec("infiniband", 50 * GB, 10e-6,
                           "InfiniBand NDR, ConnectX-7 400 Gb/s per GPU"),
    # RoCE v2 on 400 GbE (ConnectX-7 / BlueField-3 in Ethernet mode): the same line rate as NDR,
    # a little more latency through Ethernet switches and congestion control (Splitwise's and
    # llm-d's cloud setups).
    "roce": LinkSpec("roce", 50 * GB, 20e-6, "RoCE v2, 400 GbE per GPU"),
    # PCIe Gen5 x16: 64 GB/s per direction (PCI-SIG 5.0: 32 GT/s x 16 lanes, 128b/130b), the
    # bound when KV goes GPU -> host -> NIC without GPUDirect, or between GPUs with no NVLink.
    "pcie": LinkSpec("pcie", 64 * GB, 10e-6, "PCIe Gen5 x16, 64 GB/s per direction"),
}

LINK_NAMES: tuple[str, ...] = tuple(LINKS)


def get_link(name: str) -> LinkSpec:
    """The catalog entry for a link name (``nvlink``, ``infiniband``, ``roce``, ``pcie``)."""
    try:
        return LINKS[name]
    except KeyError:
        raise ConfigError(f"disaggregation.link: unknown link {name!r}; allowed: "
                          f"{', '.join(LINK_NAMES)}") from None
