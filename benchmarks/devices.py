"""Where a solver benchmark runs: the device each framework computes on, waiting for its
work, the peak memory a run adds, and what the machine is.

- `use_device(device)`: JAX's default device for the process (`jax_default_device`), so
  that every array the examples and the peers make lands there; PyTorch's tensors are
  placed by the examples themselves (`with_device`).
- `with_device(function, device)`: the function, given `device=` when it takes one (the
  examples' `--device cpu|cuda`); on the CPU a function without it is called as it is.
- `Peak(device, framework)`: a context that measures the peak memory its block adds, in
  bytes: on the CPU the process's resident set (VmHWM, reset through
  /proc/self/clear_refs), on CUDA PyTorch's allocator (`max_memory_allocated`, reset) or
  JAX's device statistics (`peak_bytes_in_use`, which JAX cannot reset: the process's
  peak so far, so each framework's memory is measured in a process of its own).
"""

from __future__ import annotations

import inspect
import os
import platform
import sys
from pathlib import Path

DEVICES = ("cpu", "cuda")
_jax_device = None  # the device use_device chose for JAX


def use_device(device: str) -> None:
    """Make `device` JAX's default (when JAX is installed) and check it is there."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda: PyTorch sees no CUDA device")
    try:
        import jax
    except ImportError:
        return
    global _jax_device
    jax.config.update("jax_enable_x64", True)
    _jax_device = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    jax.config.update("jax_default_device", _jax_device)


def jax_device() -> str:
    """ "cuda" or "cpu": where `use_device` put JAX's default device."""
    return "cuda" if _jax_device is not None and _jax_device.platform == "gpu" else "cpu"


def with_device(function, device: str):
    """`function` with `device=device` bound when its signature takes it."""
    if "device" in inspect.signature(function).parameters:
        return lambda *args, **kwargs: function(*args, device=device, **kwargs)
    if device == "cpu":
        return function
    raise RuntimeError(
        f"{function.__module__}.{function.__qualname__} takes no device= argument: the "
        f"examples' --device {device} is what runs them there"
    )


def synchronize(device: str) -> None:
    """Wait for PyTorch's queued CUDA work (JAX's results are waited on where used)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class Peak:
    """`with Peak(device, framework) as peak: ...`, then `peak.bytes`: the block's peak
    memory over what was in use when it began (None where it cannot be measured)."""

    def __init__(self, device: str, framework: str | None):
        self.device, self.framework = device, framework
        self.bytes: int | None = None
        self.kind = "unmeasured"

    def __enter__(self) -> Peak:
        if self.device == "cpu":
            try:
                Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
                self._before = _status_kib("VmRSS") * 1024
                self.kind = "resident set (VmHWM) over the start's"
            except OSError:
                self.kind = "unmeasured (no /proc/self/clear_refs)"
        elif self.framework == "torch":
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._before = torch.cuda.memory_allocated()
            self.kind = "torch.cuda.max_memory_allocated over the start's"
        elif self.framework == "jax":
            stats = _jax_stats()
            if stats is not None:
                self._before = stats.get("bytes_in_use", 0)
                self.kind = "JAX peak_bytes_in_use (the process's) over the start's in use"
        return self

    def __exit__(self, *exc) -> None:
        if not hasattr(self, "_before"):
            return
        if self.device == "cpu":
            peak = _status_kib("VmHWM") * 1024
        elif self.framework == "torch":
            import torch

            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = (_jax_stats() or {}).get("peak_bytes_in_use", self._before)
        self.bytes = int(peak - self._before)


def _jax_stats() -> dict | None:
    return None if _jax_device is None else _jax_device.memory_stats()


def machine(device: str) -> dict:
    """The machine, the versions that matter and the load, for a results file."""
    versions = {"python": platform.python_version()}
    for name in ("numpy", "scipy", "torch", "jax", "warp", "gtsam", "jaxls"):
        module = sys.modules.get(name)
        if module is not None:
            version = getattr(module, "__version__", None)
            if name == "warp":
                version = module.config.version
            versions[name] = version or "installed"
    description = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "device": device,
    }
    if device == "cuda":
        import torch

        description["gpu"] = torch.cuda.get_device_name()
    return description
