"""How the rendered blocks write numbers, intervals, tables, learning rates and the arms' names: one spelling for every
family of results (:mod:`scripts.doc_blocks`)."""

from __future__ import annotations


def f3(x: float) -> str:
    return f"{x:.3f}"


def sgn(x: float) -> str:
    return f"{x:+.3f}"


def count(n: int) -> str:
    return f"{n:,}"


def ci(d: dict, key: str = "difference", sign: bool = True, bold: bool = False) -> str:
    """``+0.007 [+0.001, +0.013]`` from a difference entry; bold (when asked) where the interval excludes 0."""
    form = sgn if sign else f3
    text = f"{form(d[key])} [{form(d['low'])}, {form(d['high'])}]"
    return f"**{text}**" if bold and (d["low"] > 0 or d["high"] < 0) else text


def seeds(values, form=sgn) -> str:
    return ", ".join(form(v) for v in values)


def table(header: list[str], rows: list[list], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def lr(x: float) -> str:
    """``5e-5``, ``1.5e-4``, ``1e-3`` as the docs write learning rates."""
    mantissa, exponent = f"{x:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


ARM_NAMES = {
    "sft": "SFT",
    "rft": "RFT",
    "online_rft": "online RFT",
    "dpo": "DPO",
    "grpo_outcome": "GRPO outcome",
    "grpo_process": "GRPO process",
    "outcome_skip": "outcome + skip",
    "outcome_refill": "outcome + refill",
    "outcome_fixed_beta": "fixed β",
    "outcome_adaptive_beta": "adaptive β",
    "process_refill": "process + refill",
    "base": "base",
    "fewshot8": "8 worked examples",
}
