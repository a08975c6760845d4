"""Device properties of the GPUs the GPU-free harness can stand in for.

Values are what ``torch.cuda.get_device_properties`` reports on the real parts. The
h200 profile was read off the project's H200 and is checked against it by
test/test_harness.py whenever that GPU is present; ``total_memory`` of the others is
the nominal size (Inductor's codegen does not read it). The clocks and bus width of
h200 and h100 are what the project's H200 and an H100 SXM reported (2026-11-23); those
of a100, a10g and l4 (two of the parts upstream CI runs on: 99 KB of shared memory a
block, 1,536 threads an SM) are their specs.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GPUProfile:
    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int
    L2_cache_size: int
    shared_memory_per_block_optin: int
    shared_memory_per_multiprocessor: int
    clock_rate: int  # kHz, the SMs' maximum
    memory_clock_rate: int  # kHz
    memory_bus_width: int  # bits
    regs_per_multiprocessor: int = 65536
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    warp_size: int = 32
    shared_memory_per_block: int = 49152
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    gcnArchName: str = "NVIDIA CUDA"

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def cc(self) -> int:
        return self.major * 10 + self.minor


_MiB = 1 << 20

GPU_PROFILES: dict[str, GPUProfile] = {
    "h200": GPUProfile(
        name="NVIDIA H200",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=150109880320,
        L2_cache_size=60 * _MiB,
        shared_memory_per_block_optin=232448,
        shared_memory_per_multiprocessor=233472,
        clock_rate=1980000,
        memory_clock_rate=3201000,
        memory_bus_width=6016,
    ),
    "h100": GPUProfile(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=81559 * _MiB,
        L2_cache_size=50 * _MiB,
        shared_memory_per_block_optin=232448,
        shared_memory_per_multiprocessor=233472,
        clock_rate=1980000,
        memory_clock_rate=2619000,
        memory_bus_width=5120,
    ),
    "a100": GPUProfile(
        name="NVIDIA A100-SXM4-80GB",
        major=8,
        minor=0,
        multi_processor_count=108,
        total_memory=81153 * _MiB,
        L2_cache_size=40 * _MiB,
        shared_memory_per_block_optin=166912,
        shared_memory_per_multiprocessor=167936,
        clock_rate=1410000,
        memory_clock_rate=1593000,
        memory_bus_width=5120,
    ),
    "a10g": GPUProfile(
        name="NVIDIA A10G",
        major=8,
        minor=6,
        multi_processor_count=80,
        total_memory=23028 * _MiB,
        L2_cache_size=6 * _MiB,
        shared_memory_per_block_optin=101376,
        shared_memory_per_multiprocessor=102400,
        clock_rate=1710000,
        memory_clock_rate=6251000,
        memory_bus_width=384,
        max_threads_per_multi_processor=1536,
    ),
    "l4": GPUProfile(
        name="NVIDIA L4",
        major=8,
        minor=9,
        multi_processor_count=58,
        total_memory=23034 * _MiB,
        L2_cache_size=48 * _MiB,
        shared_memory_per_block_optin=101376,
        shared_memory_per_multiprocessor=102400,
        clock_rate=2040000,
        memory_clock_rate=6251000,
        memory_bus_width=192,
        max_threads_per_multi_processor=1536,
    ),
}


# the profile the GPU-free harness fakes unless told otherwise
DEFAULT_PROFILE = "h200"


def get_profile(gpu: str) -> GPUProfile:
    try:
        return GPU_PROFILES[gpu]
    except KeyError:
        raise ValueError(
            f"unknown GPU profile {gpu!r}; known: {', '.join(sorted(GPU_PROFILES))}"
        ) from None
