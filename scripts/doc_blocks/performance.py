"""The performance blocks (``benchmarks/results``): the benchmarks that write their own table, the summary of every
benchmark, and the GPU measurements (sampling speed, the GRPO step by kind of policy)."""

from __future__ import annotations

from scripts.doc_blocks.formats import table
from scripts.doc_blocks.registry import renderer


def measured_table(b: dict) -> str:
    """A benchmark's own table under the date it was measured (its JSON's `date` and `table`)."""
    return f"Measured {b['date'][:10]}:\n\n{b['table']}"


# the benchmarks that write their own table: one block each, the same rendering
for _name, _source in [
    ("real_step", "benchmarks/results/real_step.json"),
    ("real_step_2026_11_26", "benchmarks/results/real_step_2026-11-26.json"),
    ("real_step_issue49", "benchmarks/results/real_step_issue49.json"),
    ("lora_sampling", "benchmarks/results/lora_sampling.json"),
    ("eval_real", "benchmarks/results/eval_real.json"),
    ("fp32_prefix", "benchmarks/results/fp32_prefix.json"),
]:
    renderer(_name, _source)(measured_table)


#: Rows of `summary.json` timed on the first design's 1 M-parameter base, left out until re-run on the shipped one.
FIRST_DESIGN_BENCHMARKS = ("overhead.py", "eval_throughput.py")


@renderer("benchmarks_summary", "benchmarks/results/summary.json")
def benchmarks_summary(s: dict) -> str:
    rows = [[*row[:5], row[5], row[6][:10]] for row in s["rows"] if row[0] not in FIRST_DESIGN_BENCHMARKS]
    return table(["benchmark", "measure", "value", "target", "result", "load avg (1/5/15 min)", "date"], rows)


GPU_DIR = "benchmarks/results/gpu_2026-11-24"


@renderer("gpu_sampling", f"{GPU_DIR}/gpu_sampling.json")
def gpu_sampling(b: dict) -> str:
    methods = ["ours", "ours_static", "ours_compiled", "generate", "generate_static"]
    rows = []
    for r in b["results"]:
        ratio = 1 / r["time_over_generate_static"]["ours_compiled"]["median_of_ratios"]
        rows.append(
            [
                f"{r['prompts']} x {r['samples_per_prompt']} ({r['slots']} slots)",
                *(f"{r['samples_per_second'][m]:.1f}" for m in methods),
                f"{ratio:.2f}x",
            ]
        )
    header = [
        "prompts x samples",
        "ours eager",
        "ours static",
        "ours compiled",
        "generate",
        "generate(static)",
        "compiled / generate(static)",
    ]
    device = b["device"]
    return (
        f"Samples/s ({device['name']}, torch {device['torch']}, {b['date'][:10]}; the last column: the median over "
        f"repetitions of the time ratio, inverted):\n\n" + table(header, rows, ["---", *["---:"] * 6])
    )


@renderer("gpu_step", f"{GPU_DIR}/gpu_step_0.5b.json", f"{GPU_DIR}/gpu_step_1.5b.json")
def gpu_step(*shapes: dict) -> str:
    rows = []
    for b in shapes:
        cells, static = [], []
        for kind in ("full", "lora", "qlora"):
            v = b["kinds"][kind]["variants"]
            off = v["off"]["seconds"]["median"]
            cells.append(f"{off:.3g} s, {v['off']['peak_bytes'] / 2**30:.1f} GiB")
            static.append(f"{b['kinds'][kind]['time_over_off']['static']['median_of_ratios']:.2f}x")
        rows.append([b["shape"].replace("b", "B"), *cells, " / ".join(static)])
    header = ["shape", "full", "LoRA", "QLoRA", "TRL `cache_implementation: static`, time / off (full, LoRA, QLoRA)"]
    return table(header, rows)
