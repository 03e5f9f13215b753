"""This process's resident memory, read from ``/proc/self/status`` (psutil / getrusage where there is none).

The peak counter can be reset (``/proc/self/clear_refs``), so one worker process can measure the peak of a training
step after its model is loaded (:mod:`benchmarks.qlora_memory`).
"""

from __future__ import annotations

from pathlib import Path


def _status(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss() -> int:
    value = _status("VmRSS")
    if value is None:
        import psutil

        value = psutil.Process().memory_info().rss
    return value


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak() -> int:
    value = _status("VmHWM")
    if value is None:
        import resource

        value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return value
