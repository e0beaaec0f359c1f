"""The machine a run measures, in words: its cores, its hardware, the library versions."""

from __future__ import annotations

import contextlib
import os
import platform

__all__ = ["cores", "describe", "versions"]


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    return ""


def describe(kind: str = "cpu", jax_device=None) -> str:
    """The hardware in words: "2-core x86-64 CPU (AMD EPYC)", or the GPU and its host."""
    arch = platform.machine().replace("_", "-")
    if kind == "gpu":
        name = getattr(jax_device, "device_kind", None)
        if not name:
            try:
                import torch

                name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA"
            except ImportError:
                name = "unknown"
        return f"{name} GPU, {cores()}-core {arch} host"
    model = _cpu_model()
    return f"{cores()}-core {arch} CPU" + (f" ({model})" if model else "")


def versions(libraries=("torch", "flax", "keras", "equinox")) -> str:
    """Python, jax and jaxlib, and those of `libraries` that are installed."""
    from importlib import metadata

    out = [f"Python {platform.python_version()}"]
    for name in ("jax", "jaxlib", *libraries):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out.append(f"{name} {metadata.version(name)}")
    return ", ".join(out)
