"""Device facts and phase timers of benchmarks/real_step.py (moved out of it to keep it one screen of logic)."""

from __future__ import annotations

import functools
import platform
import time
from collections import defaultdict


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False on this machine")
    return name


def cpu_facts() -> dict:
    """The CPU a result was measured on, with what decides bf16 speed (``grpo_ext.modeling.cpu_bf16_support``)."""
    from grpo_ext.modeling import cpu_bf16_support

    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"type": "cpu", "name": model, "bf16": cpu_bf16_support()}


def device_facts(device: str) -> dict:
    if device == "cuda":
        from benchmarks import _gpu

        return _gpu.device_facts(device)
    return cpu_facts()


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class PhaseClock:
    """Seconds spent in wrapped methods of one trainer, accumulated by phase until :meth:`take`."""

    def __init__(self, device: str):
        self.device = device
        self.totals: dict[str, float] = defaultdict(float)

    def wrap(self, obj, method: str, phase: str) -> None:
        original = getattr(obj, method)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            synchronize(self.device)
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                synchronize(self.device)
                self.totals[phase] += time.perf_counter() - start
                self.totals[phase + "_cpu"] += time.process_time() - cpu

        setattr(obj, method, timed)  # an instance attribute: TRL calls it as self.<method>(...)

    def take(self) -> dict[str, float]:
        out, self.totals = dict(self.totals), defaultdict(float)
        return out
