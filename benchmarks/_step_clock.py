"""Device facts, phase timers and the summary table of benchmarks/real_step.py (moved out of it to keep it one
screen of logic)."""

from __future__ import annotations

import functools
import platform
import time
from collections import defaultdict

from benchmarks import _common

PHASES = ("generation", "scoring", "loss_forward", "loss_backward", "optimizer", "step")
CPU_PHASES = tuple(p + "_cpu" for p in PHASES)


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False on this machine")
    return name


def cpu_facts() -> dict:
    """The CPU a result was measured on, with what decides bf16 speed (``grpo_ext.policy_loading.cpu_bf16_support``)."""
    from grpo_ext.policy_loading import cpu_bf16_support

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


def summarise(raw: dict, names: list[str]) -> dict:
    ok = [n for n in names if n not in raw["errors"] and raw["steps"].get(n)]
    base = ok[0] if ok else None
    out = {}
    for n in ok:
        rows = raw["steps"][n]
        entry = {p: _common.summary([r[p] for r in rows]) for p in PHASES + CPU_PHASES}
        for suffix in ("", "_cpu"):
            entry["loss_forward_backward" + suffix] = _common.summary(
                [r["loss_forward" + suffix] + r["loss_backward" + suffix] for r in rows]
            )
        for key in ("mean_completion_length", "clipped_ratio", "reward"):
            entry[key] = _common.median([r[key] for r in rows])
        entry["steps"] = rows
        entry["warmup_steps"] = raw["warmups"].get(n, [])
        entry |= raw["built"].get(n, {})
        if base is not None:
            for suffix in ("", "_cpu"):
                entry[f"speedup{suffix}_over_{base}"] = _common.paired_ratio(
                    [r["step" + suffix] for r in raw["steps"][base]], [r["step" + suffix] for r in rows]
                )
        out[n] = entry
    return {"baseline": base, "variants": out}


def table(summary: dict, errors: dict, names: list[str]) -> str:
    base = summary["baseline"]
    rows = []
    for n in names:
        if n in errors:
            rows.append([n, f"failed: {errors[n][:160]}", "", "", "", "", "", "", "", ""])
            continue
        v = summary["variants"].get(n)
        if v is None:
            continue
        speed = v.get("speedup_cpu_over_" + base, {}) if base else {}
        wall = v.get("speedup_over_" + base, {}) if base else {}
        rows.append(
            [
                n,
                f"{v['generation_cpu']['median']:.3g}",
                f"{v['loss_forward_backward_cpu']['median']:.3g}",
                f"{v['step_cpu']['median']:.3g}",
                f"{speed['median_of_ratios']:.2f}x" if speed else "",
                f"{v['step']['median']:.3g} ({v['step']['min']:.3g}-{v['step']['max']:.3g})",
                f"{wall['median_of_ratios']:.2f}x" if wall else "",
                f"{v['mean_completion_length']:.1f}",
                f"{v['clipped_ratio']:.2f}",
                f"{v['reward']:.3f}",
            ]
        )
    headers = [
        "generation:dtype",
        "generation CPU s",
        "loss fwd+bwd CPU s",
        "step CPU s",
        f"speed-up (CPU) vs {base}",
        "step wall s (min-max)",
        "speed-up (wall)",
        "mean length",
        "clipped",
        "mean reward",
    ]
    return _common.markdown_table(headers, rows)
