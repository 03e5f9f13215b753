"""Shared helpers for the benchmarks: alternating side-by-side timing, statistics, markdown table, JSON results.

The environment (one thread, offline hub) is pinned in ``benchmarks/__init__.py``, before any torch import.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from grpo_ext.io import portable_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "lm_eval", "numpy", "grpo-ext")
#: The `params` fields that hold a path of the machine that ran the benchmark (recorded portable: see write_results).
PATH_PARAMS = ("model", "workdir")


def set_threads(n: int = 1) -> None:
    import torch

    torch.set_num_threads(n)


def model_dir() -> str:
    """The embedded model folder; ``GRPO_EXT_BENCH_MODEL`` (or the tests' ``GRPO_EXT_TEST_MODEL``) overrides it."""
    override = os.environ.get("GRPO_EXT_BENCH_MODEL") or os.environ.get("GRPO_EXT_TEST_MODEL")
    if override:
        return override
    from grpo_ext.model_paths import resolve_model_path

    return resolve_model_path("embedded")


# ---- machine facts ---------------------------------------------------------------------------------------------


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


# ---- statistics --------------------------------------------------------------------------------------------------


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def quartiles(xs: Sequence[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return (float(xs[0]), float(xs[0]))
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (float(q[0]), float(q[2]))


def summary(xs: Sequence[float]) -> dict:
    """Median, quartiles, min, max and the raw values of a list of measurements."""
    q1, q3 = quartiles(xs)
    return {
        "median": median(xs),
        "q1": q1,
        "q3": q3,
        "min": float(min(xs)),
        "max": float(max(xs)),
        "n": len(xs),
        "values": [float(x) for x in xs],
    }


def paired_ratio(num: Sequence[float], den: Sequence[float]) -> dict:
    """Ratio of two alternated series: median of the per-repetition ratios (robust to load drift between
    repetitions) with its quartiles, and the ratio of the medians."""
    ratios = [a / b for a, b in zip(num, den, strict=True)]
    q1, q3 = quartiles(ratios)
    return {
        "median_of_ratios": median(ratios),
        "q1": q1,
        "q3": q3,
        "ratio_of_medians": median(num) / median(den),
        "values": ratios,
    }


# ---- timing ------------------------------------------------------------------------------------------------------


def alternate(
    fns: dict[str, Callable[[int], object]],
    reps: int,
    warmup: int = 1,
    before: Callable[[str, int], None] | None = None,
    progress: bool = True,
    cpu_times: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Time each function `reps` times, interleaved, after `warmup` untimed rounds.

    Repetition ``r`` runs every function once, in an order rotated by ``r`` (A B C, B C A, C A B, ...) so no
    function always runs first or last. ``fn(r)`` receives the repetition index (negative in warm-ups);
    ``before(name, r)`` runs untimed right before each call (restore state, seed RNGs, collect garbage).
    Returns wall-clock seconds per function; ``cpu_times``, when given, receives this process's CPU seconds (less
    sensitive to other jobs on the machine than wall time, for single-threaded work).
    """
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(-warmup, reps):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if before is not None:
                before(name, r)
            gc.collect()
            cpu_start, start = time.process_time(), time.perf_counter()
            fns[name](r)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            if r >= 0:
                times[name].append(elapsed)
                if cpu_times is not None:
                    cpu_times.setdefault(name, []).append(cpu)
        if progress and r >= 0:
            last = ", ".join(f"{name} {times[name][-1]:.4g}s" for name in names)
            print(f"  rep {r + 1}/{reps}: {last}", file=sys.stderr, flush=True)
    return times


# ---- output ------------------------------------------------------------------------------------------------------


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    def cell(x) -> str:
        if isinstance(x, float):
            return f"{x:.4g}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def portable_params(params: dict) -> dict:
    """``params`` with its :data:`PATH_PARAMS` as :func:`grpo_ext.io.portable_path` gives them (relative to the
    repository when inside it): a committed result names no folder of the machine that ran it."""
    return {k: portable_path(v) if k in PATH_PARAMS and isinstance(v, str) else v for k, v in params.items()}


def write_results(name: str, payload: dict, table: str, results_dir: Path | None = None) -> Path:
    """Print the table and write ``<results_dir>/<name>.json`` (default ``benchmarks/results/``; payload + table +
    machine facts; the paths in ``payload["params"]`` portable, see :func:`portable_params`)."""
    results_dir = RESULTS_DIR if results_dir is None else Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(payload.get("params"), dict):
        payload = {**payload, "params": portable_params(payload["params"])}
    record = {
        "benchmark": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", f"benchmarks.{Path(sys.argv[0]).stem}", *sys.argv[1:]]),
        **payload,
        "load_average_end": load_average(),
        "machine": machine(),
        "versions": versions(),
        "table": table,
    }
    path = results_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    print(table)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def load_result(name: str) -> dict | None:
    """``results/<name>.json`` as written by that benchmark, or None before it has run."""
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def load_cell(values) -> str:
    """A load-average list as one summary cell (``0.5 / 0.7 / 0.9``); empty when there is none."""
    return " / ".join(str(v) for v in values) if values else ""


def dated_rows(result: dict | None, rows: Callable[[dict], Iterable[Sequence]]) -> list[list]:
    """A benchmark's rows of the ``run_all`` summary: ``rows(result)`` gives ``(measure, value, target, verdict)`` per
    row, or with a fifth item, that row's own load average; each row gets the load average at the end of the run
    (``load_average_end``) unless it has its own, and the run's date. No rows before the benchmark has run
    (``result`` None). Every benchmark's ``summary_rows`` builds its rows here, so the columns agree."""
    if not result:
        return []
    # a row's own load average when it has one (a result of several runs); the run's end load otherwise
    return [
        [*row[:4], load_cell(row[4] if len(row) > 4 else result["load_average_end"]), result["date"]]
        for row in rows(result)
    ]
