"""GPU hardware catalog: the datasheet numbers a roofline cost model and a memory plan need.

Why a table of peak numbers and not measured ones: peaks are public, stable and comparable
across vendors; what a real kernel achieves is a fraction of them, and that fraction lives
in one place, the efficiency constants of ``sim.pricing.roofline`` (fitted to real A100
measurements). All FLOP/s figures are *dense* (no 2:4 sparsity), per GPU, as printed in the
vendor datasheets cited next to each entry.

Units: bytes, bytes/s and FLOP/s (not GB or TFLOPS) so nothing downstream converts.
Bandwidths of links are *per direction, per GPU* because that is what a ring collective or a
PCIe copy is limited by (NVIDIA quotes NVLink as the bidirectional total: 600 GB/s on A100
is 300 GB/s each way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from sim.errors import ConfigError

GB = 1e9
GiB = 1 << 30
MiB = 1 << 20
TFLOPS = 1e12


@dataclass(frozen=True)
class HardwareSpec:
    """One GPU model, as the cost model and memory plan see it.

    - ``memory_bytes``: HBM/GDDR capacity (nominal GiB; CUDA reports 1-3% less, which the
      memory plan's fixed reserve absorbs).
    - ``device_memory_bytes``: what the driver reports as the device's total (nvidia-smi,
      ``torch.cuda.mem_get_info``) where it is well below the nominal capacity: a GDDR6 data-centre
      GPU keeps 1/16 of its memory for inline ECC, on by default (L40S: 46,068 MiB of 48 GiB).
      vLLM's ``gpu_memory_utilization`` and SGLang's memory classes are fractions of this total,
      so the memory plan is too (``usable_memory_bytes``). None: the nominal capacity.
    - ``memory_bandwidth``: peak device-memory bandwidth, bytes/s.
    - ``peak_flops``: dense tensor-core FLOP/s (or OP/s for int8) keyed by compute dtype:
      ``fp32`` (plain FP32 CUDA cores), ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``int8``,
      ``fp4`` (Blackwell's FP4 tensor cores, MXFP4 and NVFP4).
      A dtype the GPU has no tensor-core path for is absent.
    - ``interconnect_bandwidth``: GPU-to-GPU bandwidth inside a node, per direction
      (NVLink, Infinity Fabric, or PCIe where the GPU has no bridge).
    - ``interconnect``: its name, for reports.
    - ``pcie_bandwidth``: host link per direction; what KV swap to CPU memory crosses.
    - ``network_bandwidth``: per-GPU scale-out bandwidth (InfiniBand/RoCE NIC) used when a
      tensor- or pipeline-parallel group spans nodes.
    - ``gpus_per_node``: GPUs sharing the intra-node interconnect.
    - ``usd_per_gpu_hour``: indicative on-demand cloud price (2024-25 list prices); a
      default for cost reports, meant to be overridden.
    """

    name: str
    memory_bytes: int
    memory_bandwidth: float
    peak_flops: Mapping[str, float]
    interconnect: str
    interconnect_bandwidth: float
    pcie_bandwidth: float
    network_bandwidth: float
    gpus_per_node: int
    usd_per_gpu_hour: float
    description: str = ""
    aliases: tuple[str, ...] = field(default=())
    device_memory_bytes: int | None = None

    @property
    def usable_memory_bytes(self) -> int:
        """The total the driver reports: what serving engines take their memory fractions of."""
        return self.device_memory_bytes if self.device_memory_bytes is not None else self.memory_bytes

    def flops(self, compute_dtype: str) -> float:
        """Peak dense FLOP/s for ``compute_dtype``; raises ConfigError if unsupported."""
        try:
            return self.peak_flops[compute_dtype]
        except KeyError:
            raise ConfigError(
                f"hardware {self.name} has no {compute_dtype} tensor-core path; "
                f"supported: {', '.join(sorted(self.peak_flops))}"
            ) from None

    def supports(self, compute_dtype: str) -> bool:
        return compute_dtype in self.peak_flops


def _ampere_a100(memory_gib: int, bandwidth_gbs: float, usd: float, aliases: tuple[str, ...]
                 ) -> HardwareSpec:
    # NVIDIA A100 datasheet (nvidia.com, "NVIDIA A100 Tensor Core GPU", SXM4 column):
    # FP32 19.5 TF, TF32 156 TF, BF16/FP16 312 TF, INT8 624 TOPS (all dense);
    # HBM2 1,555 GB/s (40GB) or HBM2e 2,039 GB/s (80GB); NVLink 3: 600 GB/s bidirectional;
    # PCIe Gen4 x16: 32 GB/s per direction; DGX A100: 8 GPUs, 8x HDR 200 Gb/s (25 GB/s).
    return HardwareSpec(
        name=f"a100-{memory_gib}gb",
        memory_bytes=memory_gib * GiB,
        memory_bandwidth=bandwidth_gbs * GB,
        peak_flops={"fp32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS, "fp16": 312 * TFLOPS,
                    "bf16": 312 * TFLOPS, "int8": 624 * TFLOPS},
        interconnect="NVLink 3 (NVSwitch)",
        interconnect_bandwidth=300 * GB,
        pcie_bandwidth=32 * GB,
        network_bandwidth=25 * GB,
        gpus_per_node=8,
        usd_per_gpu_hour=usd,
        description=f"NVIDIA A100-SXM4-{memory_gib}GB",
        aliases=aliases,
    )


def _hopper(name: str, memory_gib: int, bandwidth_gbs: float, usd: float, desc: str,
            aliases: tuple[str, ...]) -> HardwareSpec:
    # NVIDIA H100 / H200 datasheets (SXM5 columns; H200 has H100's compute):
    # FP32 67 TF, TF32 494.7 TF, BF16/FP16 989.4 TF, FP8 1,978.9 TF, INT8 1,978.9 TOPS
    # (dense = half the "with sparsity" figures); NVLink 4: 900 GB/s bidirectional;
    # PCIe Gen5 x16: 64 GB/s per direction; DGX H100/H200: 8x NDR 400 Gb/s (50 GB/s).
    return HardwareSpec(
        name=name,
        memory_bytes=memory_gib * GiB,
        memory_bandwidth=bandwidth_gbs * GB,
        peak_flops={"fp32": 67 * TFLOPS, "tf32": 494.7 * TFLOPS, "fp16": 989.4 * TFLOPS,
                    "bf16": 989.4 * TFLOPS, "fp8": 1978.9 * TFLOPS, "int8": 1978.9 * TFLOPS},
        interconnect="NVLink 4 (NVSwitch)",
        interconnect_bandwidth=450 * GB,
        pcie_bandwidth=64 * GB,
        network_bandwidth=50 * GB,
        gpus_per_node=8,
        usd_per_gpu_hour=usd,
        description=desc,
        aliases=aliases,
    )


def _cdna3(name: str, memory_gib: int, bandwidth_gbs: float, usd: float, desc: str,
           aliases: tuple[str, ...]) -> HardwareSpec:
    # AMD Instinct MI300X / MI325X datasheets (CDNA 3, same compute): FP32 163.4 TF (matrix),
    # TF32 653.7 TF, BF16/FP16 1,307.4 TF, FP8 2,614.9 TF, INT8 2,614.9 TOPS (dense);
    # Infinity Fabric: 7 links, 896 GB/s aggregate bidirectional (448 GB/s each way);
    # PCIe Gen5 x16 (64 GB/s per direction); 8 GPUs per OAM platform.
    return HardwareSpec(
        name=name,
        memory_bytes=memory_gib * GiB,
        memory_bandwidth=bandwidth_gbs * GB,
        peak_flops={"fp32": 163.4 * TFLOPS, "tf32": 653.7 * TFLOPS,
                    "fp16": 1307.4 * TFLOPS, "bf16": 1307.4 * TFLOPS,
                    "fp8": 2614.9 * TFLOPS, "int8": 2614.9 * TFLOPS},
        interconnect="AMD Infinity Fabric",
        interconnect_bandwidth=448 * GB,
        pcie_bandwidth=64 * GB,
        network_bandwidth=50 * GB,
        gpus_per_node=8,
        usd_per_gpu_hour=usd,
        description=desc,
        aliases=aliases,
    )


_CATALOG: dict[str, HardwareSpec] = {
    spec.name: spec
    for spec in (
        _ampere_a100(40, 1555, 1.29, ("a100-sxm4-40gb", "nvidia-a100-sxm4-40gb")),
        _ampere_a100(80, 2039, 1.79, ("a100-sxm4-80gb", "nvidia-a100-sxm4-80gb")),
        _hopper("h100-sxm", 80, 3350, 2.99, "NVIDIA H100-SXM5-80GB",
                ("h100", "h100-sxm5", "h100-80gb", "nvidia-h100-80gb-hbm3")),
        _hopper("h200", 141, 4800, 3.79, "NVIDIA H200-SXM-141GB", ("h200-sxm", "nvidia-h200")),
        # NVIDIA H100 datasheet, "H100 PCIe" column (114 SMs, 300-350 W): 80 GB HBM2e,
        # 2 TB/s; FP32 51 TF, TF32 378 TF, BF16/FP16 756.5 TF, FP8 1,513 TF, INT8 1,513 TOPS
        # (dense: half the sheet's sparse 756/1,513/3,026/3,026); NVLink bridge 600 GB/s
        # bidirectional (300 GB/s each way) between the two GPUs of a bridged pair, so the
        # NVLink domain (``gpus_per_node``) is 2; PCIe Gen5 x16, 128 GB/s bidirectional
        # (64 GB/s each way) to the host. A group past the pair crosses PCIe Gen5 or a
        # 400 Gb/s NIC: 50 GB/s stands for both. Lambda on-demand H100 PCIe: $2.49/h.
        HardwareSpec(
            name="h100-pcie",
            memory_bytes=80 * GiB,
            memory_bandwidth=2000 * GB,
            peak_flops={"fp32": 51 * TFLOPS, "tf32": 378 * TFLOPS, "fp16": 756.5 * TFLOPS,
                        "bf16": 756.5 * TFLOPS, "fp8": 1513 * TFLOPS, "int8": 1513 * TFLOPS},
            interconnect="NVLink 4 bridge (pairs)",
            interconnect_bandwidth=300 * GB,
            pcie_bandwidth=64 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=2,
            usd_per_gpu_hour=2.49,
            description="NVIDIA H100 PCIe 80GB",
            aliases=("h100-pcie-80gb", "nvidia-h100-pcie"),
        ),
        # NVIDIA HGX B200 (Blackwell, 1,000 W per GPU), per GPU: 180 GB HBM3e (1,440 GB per
        # 8-GPU baseboard; CUDA reports 179 GiB), 7.7 TB/s (the shipping figure: NVIDIA's
        # Blackwell Ultra datasheet B200 column and its LLM-benchmarking B200 reference
        # architecture; the 8 TB/s of the March 2024 announcement was the 192 GB preview's,
        # and aiconfigurator's b200_sxm.yaml also has 7.7); dense FP32 75 TF (HGX B200
        # sheet: 600 TF per 8 GPUs), TF32 1,100 TF, BF16/FP16 2,250 TF, FP8 4,500 TF, INT8
        # 4,500 TOPS, FP4 9,000 TF (half the sheet's "with sparsity" 2.2/4.5/9/9/18 PF);
        # NVLink 5: 1.8 TB/s bidirectional (900 GB/s each way) through NVSwitch; host link
        # PCIe Gen5 x16 (64 GB/s); DGX B200: 8 GPUs, 8x ConnectX-7 400 Gb/s (50 GB/s per
        # GPU).
        HardwareSpec(
            name="b200",
            memory_bytes=180 * GiB,
            memory_bandwidth=7700 * GB,
            peak_flops={"fp32": 75 * TFLOPS, "tf32": 1100 * TFLOPS, "fp16": 2250 * TFLOPS,
                        "bf16": 2250 * TFLOPS, "fp8": 4500 * TFLOPS, "int8": 4500 * TFLOPS,
                        "fp4": 9000 * TFLOPS},
            interconnect="NVLink 5 (NVSwitch)",
            interconnect_bandwidth=900 * GB,
            pcie_bandwidth=64 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=5.99,
            description="NVIDIA B200 (HGX, 180GB)",
            aliases=("b200-sxm", "nvidia-b200", "hgx-b200"),
        ),
        # NVIDIA HGX B300 (Blackwell Ultra, up to 1,100 W per GPU), per GPU, from NVIDIA's
        # Blackwell Ultra datasheet (HGX B300 column) and the HGX/DGX B300 spec table: 270
        # GB HBM3e (2.1 TB per 8 GPUs; the 288 GB of 8 12-high stacks less what the GPU
        # reserves, as B200's 180 GB is its 192 GB less; aiconfigurator's b300_sxm.yaml
        # records 275,040 MiB in nvidia-smi, so 288 would overstate the KV pool by ~19 GiB),
        # 7.7 TB/s; dense FP32 75 TF, TF32 1,100 TF, BF16/FP16 2,250 TF, FP8 4,500 TF
        # (B200's: half the sparse 2.2/4.5/9 PF), FP4 13,500 TF (the DGX/HGX B300 table's
        # 108 PF dense per 8 GPUs, 1.5x B200; the per-GPU column prints 14 PF), INT8 only
        # 153.5 TOPS (307 sparse: Blackwell Ultra cut INT8 and FP64, so INT8 weights compute
        # at that rate here); NVLink 5: 1.8 TB/s bidirectional (900 GB/s each way) through
        # NVSwitch; the GPU's host link is PCIe Gen6 x16 (128 GB/s each way), but the host
        # CPUs (DGX B300: Xeon 6776P) are PCIe Gen5, so host memory is reached at Gen5 x16,
        # 64 GB/s; 8x ConnectX-8 800 Gb/s, 100 GB/s per GPU. On-demand: Ornn's 2026 rental
        # index puts B300 at $5.00-7.25/h on neoclouds; $6.99 is B200's price plus $1, as
        # GB200's is.
        HardwareSpec(
            name="b300",
            memory_bytes=270 * GiB,
            memory_bandwidth=7700 * GB,
            peak_flops={"fp32": 75 * TFLOPS, "tf32": 1100 * TFLOPS, "fp16": 2250 * TFLOPS,
                        "bf16": 2250 * TFLOPS, "fp8": 4500 * TFLOPS, "int8": 153.5 * TFLOPS,
                        "fp4": 13500 * TFLOPS},
            interconnect="NVLink 5 (NVSwitch)",
            interconnect_bandwidth=900 * GB,
            pcie_bandwidth=64 * GB,
            network_bandwidth=100 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=6.99,
            description="NVIDIA B300 (HGX, Blackwell Ultra, 270GB)",
            aliases=("b300-sxm", "b300-sxm6", "nvidia-b300", "nvidia-b300-sxm6-ac", "hgx-b300",
                     "dgx-b300"),
        ),
        # NVIDIA GB200 NVL72, per GPU (1,200 W): 186 GB HBM3e (13.4 TB per 72 GPUs), 8 TB/s
        # (576 TB/s per rack); dense FP32 80 TF, TF32 1,250 TF, BF16/FP16 2,500 TF, FP8 5,000 TF,
        # INT8 5,000 TOPS, FP4 10,000 TF (half the NVL72 sheet's sparse 180/360/720/720/1,440 PF
        # over 72 GPUs);
        # NVLink 5, 1.8 TB/s bidirectional, one NVLink domain of 72 GPUs; host link NVLink-C2C
        # to Grace, 900 GB/s bidirectional (450 GB/s each way, what KV offload to CPU crosses).
        HardwareSpec(
            name="gb200",
            memory_bytes=186 * GiB,
            memory_bandwidth=8000 * GB,
            peak_flops={"fp32": 80 * TFLOPS, "tf32": 1250 * TFLOPS, "fp16": 2500 * TFLOPS,
                        "bf16": 2500 * TFLOPS, "fp8": 5000 * TFLOPS, "int8": 5000 * TFLOPS,
                        "fp4": 10000 * TFLOPS},
            interconnect="NVLink 5 (NVL72 rack)",
            interconnect_bandwidth=900 * GB,
            pcie_bandwidth=450 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=72,
            usd_per_gpu_hour=6.99,
            description="NVIDIA GB200 NVL72, per GPU (186GB)",
            aliases=("gb200-nvl72", "nvidia-gb200"),
        ),
        # NVIDIA GB300 NVL72, per GPU (up to 1,400 W), from NVIDIA's Blackwell Ultra datasheet
        # (GB300 NVL72 column) and the GB300 NVL72 spec table: 279 GB HBM3e (20 TB per 72
        # GPUs; Google's A4X Max: 1,116 GB per 4 GPUs), 8 TB/s (576 TB/s per rack); dense FP32
        # 80 TF, TF32 1,250 TF, BF16/FP16 2,500 TF, FP8 5,000 TF (GB200's: half the sparse
        # 180/360/720 PF over 72 GPUs), FP4 15,000 TF (1,080 PF dense per rack, 1.5x GB200),
        # INT8 165 TOPS (330 sparse); NVLink 5, 1.8 TB/s bidirectional, one NVLink domain of
        # 72 GPUs; host link NVLink-C2C to Grace, 900 GB/s bidirectional (450 GB/s each way);
        # one ConnectX-8 800 Gb/s per GPU (100 GB/s). Price: GB200's plus what B300 adds to
        # B200 ($1).
        HardwareSpec(
            name="gb300",
            memory_bytes=279 * GiB,
            memory_bandwidth=8000 * GB,
            peak_flops={"fp32": 80 * TFLOPS, "tf32": 1250 * TFLOPS, "fp16": 2500 * TFLOPS,
                        "bf16": 2500 * TFLOPS, "fp8": 5000 * TFLOPS, "int8": 165 * TFLOPS,
                        "fp4": 15000 * TFLOPS},
            interconnect="NVLink 5 (NVL72 rack)",
            interconnect_bandwidth=900 * GB,
            pcie_bandwidth=450 * GB,
            network_bandwidth=100 * GB,
            gpus_per_node=72,
            usd_per_gpu_hour=7.99,
            description="NVIDIA GB300 NVL72, per GPU (Blackwell Ultra, 279GB)",
            aliases=("gb300-nvl72", "nvidia-gb300", "dgx-gb300"),
        ),
        # NVIDIA H20 (Hopper, export-compliant): 96 GB HBM3, 4.0 TB/s; dense FP32 44 TF,
        # TF32 74 TF, BF16/FP16 148 TF, FP8 296 TF, INT8 296 TOPS; NVLink 4, 900 GB/s
        # bidirectional; PCIe Gen5 x16 (64 GB/s); 8 GPUs per HGX node.
        HardwareSpec(
            name="h20",
            memory_bytes=96 * GiB,
            memory_bandwidth=4000 * GB,
            peak_flops={"fp32": 44 * TFLOPS, "tf32": 74 * TFLOPS, "fp16": 148 * TFLOPS,
                        "bf16": 148 * TFLOPS, "fp8": 296 * TFLOPS, "int8": 296 * TFLOPS},
            interconnect="NVLink 4 (NVSwitch)",
            interconnect_bandwidth=450 * GB,
            pcie_bandwidth=64 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=1.50,
            description="NVIDIA H20 96GB",
            aliases=("nvidia-h20", "h20-96gb"),
        ),
        # NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s; FP32 30.3 TF, TF32 60 TF, BF16/FP16
        # 121 TF, FP8 242.5 TF, INT8 242.5 TOPS (dense: half the sheet's sparse figures); no
        # NVLink, PCIe Gen4 x16 (32 GB/s). GCP g2-standard-8 on-demand: about $0.85/h.
        HardwareSpec(
            name="l4",
            memory_bytes=24 * GiB,
            memory_bandwidth=300 * GB,
            peak_flops={"fp32": 30.3 * TFLOPS, "tf32": 60 * TFLOPS, "fp16": 121 * TFLOPS,
                        "bf16": 121 * TFLOPS, "fp8": 242.5 * TFLOPS, "int8": 242.5 * TFLOPS},
            interconnect="PCIe Gen4 x16",
            interconnect_bandwidth=32 * GB,
            pcie_bandwidth=32 * GB,
            network_bandwidth=12.5 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=0.85,
            description="NVIDIA L4 24GB",
            aliases=("nvidia-l4",),
            device_memory_bytes=23034 * MiB,  # nvidia-smi, ECC on: 23,034 MiB
        ),
        # NVIDIA L40S datasheet: 48 GB GDDR6 864 GB/s; FP32 91.6 TF, TF32 183 TF,
        # BF16/FP16 362.05 TF, FP8 733 TF, INT8 733 TOPS (dense); no NVLink: GPUs talk over
        # PCIe Gen4 x16 (32 GB/s per direction).
        HardwareSpec(
            name="l40s",
            memory_bytes=48 * GiB,
            memory_bandwidth=864 * GB,
            peak_flops={"fp32": 91.6 * TFLOPS, "tf32": 183 * TFLOPS, "fp16": 362.05 * TFLOPS,
                        "bf16": 362.05 * TFLOPS, "fp8": 733 * TFLOPS, "int8": 733 * TFLOPS},
            interconnect="PCIe Gen4 x16",
            interconnect_bandwidth=32 * GB,
            pcie_bandwidth=32 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=1.25,
            description="NVIDIA L40S 48GB",
            aliases=("nvidia-l40s",),
            device_memory_bytes=46068 * MiB,  # nvidia-smi, ECC on: 46,068 MiB
        ),
        # NVIDIA GeForce RTX 4090 (Ada AD102, 450 W), NVIDIA Ada GPU Architecture whitepaper
        # (v2.02+, Appendix A, Table 2, dense/sparse): 24 GB GDDR6X, 384-bit at 21 Gbps,
        # 1,008 GB/s; FP32 82.6 TF, TF32 82.6 TF; FP16 and BF16 with FP32 accumulate 165.2 TF
        # (GeForce runs FP32 accumulation at half the FP16-accumulate rate: 330.3 TF is
        # FP16-accumulate dense, 330.4 TF FP32-accumulate with sparsity); FP8 with FP32
        # accumulate 330.3 TF (v2.02 corrected it from 660.6, the FP16-accumulate rate); INT8
        # 660.6 TOPS. Frameworks accumulate FP16/BF16/FP8 GEMMs in FP32, so those are the rates.
        # No NVLink, and GeForce drivers disable PCIe peer-to-peer, so GPUs exchange data
        # through host memory over PCIe Gen4 x16 (32 GB/s each way, a ceiling). 8 per node: the
        # 8-GPU 4090 servers the GPU marketplaces rent out (vLLM runs tensor parallelism
        # across them); a 25 GbE host NIC (3.125 GB/s) past the node. RunPod on-demand: about
        # $0.69/h (Secure Cloud; $0.34/h Community Cloud).
        HardwareSpec(
            name="rtx-4090",
            memory_bytes=24 * GiB,
            memory_bandwidth=1008 * GB,
            peak_flops={"fp32": 82.6 * TFLOPS, "tf32": 82.6 * TFLOPS, "fp16": 165.2 * TFLOPS,
                        "bf16": 165.2 * TFLOPS, "fp8": 330.3 * TFLOPS, "int8": 660.6 * TFLOPS},
            interconnect="PCIe Gen4 x16 (no P2P)",
            interconnect_bandwidth=32 * GB,
            pcie_bandwidth=32 * GB,
            network_bandwidth=3.125 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=0.69,
            description="NVIDIA GeForce RTX 4090 24GB",
            aliases=("rtx4090", "geforce-rtx-4090", "nvidia-geforce-rtx-4090", "4090"),
        ),
        # NVIDIA RTX PRO 6000 Blackwell Server Edition (GB202, 600 W): from NVIDIA's announcement
        # (GTC 2025) and product page: 96 GB GDDR7 on a 512-bit bus at 28 Gbps, 1,792 GB/s;
        # FP32 125 TF; 4,000 AI TOPS at FP4 with sparsity; PCIe Gen5 x16, no NVLink. NVIDIA
        # gives no dense tensor figures for it: FP4 2,000 TF dense (half the sparse figure),
        # FP8 and INT8 1,000, BF16/FP16 500, TF32 250 are derived by Blackwell's 2x per halved
        # precision, so the roofline's compute terms carry that extra uncertainty.
        HardwareSpec(
            name="rtx-pro-6000",
            memory_bytes=96 * GiB,
            memory_bandwidth=1792 * GB,
            peak_flops={"fp32": 125 * TFLOPS, "tf32": 250 * TFLOPS, "fp16": 500 * TFLOPS,
                        "bf16": 500 * TFLOPS, "fp8": 1000 * TFLOPS, "int8": 1000 * TFLOPS,
                        "fp4": 2000 * TFLOPS},
            interconnect="PCIe Gen5 x16",
            interconnect_bandwidth=64 * GB,
            pcie_bandwidth=64 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=1.99,
            description="NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB",
            aliases=("rtx-pro-6000-blackwell", "nvidia-rtx-pro-6000", "rtx-pro-6000-server"),
        ),
        # NVIDIA A10 datasheet (AWS's A10G is its cloud variant; NVIDIA publishes no separate
        # A10G sheet): 24 GB GDDR6 600 GB/s; FP32 31.2 TF, TF32 62.5 TF, BF16/FP16 125 TF,
        # INT8 250 TOPS (dense); PCIe Gen4 x16. AWS g5.xlarge on-demand: $1.006/h.
        HardwareSpec(
            name="a10g",
            memory_bytes=24 * GiB,
            memory_bandwidth=600 * GB,
            peak_flops={"fp32": 31.2 * TFLOPS, "tf32": 62.5 * TFLOPS, "fp16": 125 * TFLOPS,
                        "bf16": 125 * TFLOPS, "int8": 250 * TFLOPS},
            interconnect="PCIe Gen4 x16",
            interconnect_bandwidth=32 * GB,
            pcie_bandwidth=32 * GB,
            network_bandwidth=12.5 * GB,
            gpus_per_node=8,
            usd_per_gpu_hour=1.006,
            description="NVIDIA A10G 24GB (AWS G5)",
            aliases=("a10", "nvidia-a10g"),
            device_memory_bytes=23028 * MiB,  # nvidia-smi, ECC on: 23,028 MiB
        ),
        # MI300X: 192 GB HBM3 at 5.3 TB/s (AMD Instinct MI300X datasheet).
        _cdna3("mi300x", 192, 5300, 2.50, "AMD Instinct MI300X 192GB",
               ("amd-mi300x", "instinct-mi300x")),
        # MI325X: MI300X's compute with 256 GB HBM3E at 6 TB/s (AMD Instinct MI325X datasheet).
        _cdna3("mi325x", 256, 6000, 3.00, "AMD Instinct MI325X 256GB",
               ("amd-mi325x", "instinct-mi325x")),
    )
}

_ALIASES: dict[str, str] = {
    alias: spec.name for spec in _CATALOG.values() for alias in spec.aliases
}

HARDWARE_NAMES: tuple[str, ...] = tuple(_CATALOG)


def get_hardware(name: "str | HardwareSpec") -> HardwareSpec:
    """The catalog entry for a slug (``a100-40gb``) or alias (``h100``), case-insensitive;
    a ``HardwareSpec`` passes through (a custom GPU)."""
    if isinstance(name, HardwareSpec):
        return name
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    try:
        return _CATALOG[key]
    except KeyError:
        raise ConfigError(
            f"hardware: unknown GPU {name!r}; allowed: {', '.join(HARDWARE_NAMES)}"
        ) from None


def list_hardware() -> list[HardwareSpec]:
    return list(_CATALOG.values())
