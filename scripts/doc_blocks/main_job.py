"""The main job's search block (``results/main_job_search``): each QLoRA setting on validation beside the base in
full precision and loaded in 4 bit, and the pick's test score."""

from __future__ import annotations

from scripts.doc_blocks.formats import count, f3, sgn, table
from scripts.doc_blocks.registry import renderer


@renderer(
    "main_job_search",
    "results/main_job_search/search.json",
    "results/main_job_search/base_validation/report.json",
    "results/stage_design/qlora_4bit_eval.json",
)
def main_job_search(s: dict, base: dict, four_bit: dict) -> str:
    v = s["validation"]
    n = v["n"]
    rows = [
        ["base (fp32)", f3(s["base_score"]), f3(base["models"][0]["pass@k"][str(n)])],
        ["base loaded in 4 bit, no adapter", f3(four_bit["base"]), ""],
    ]
    for slug, score in s["scores"].items():
        rate, temp = (part.split("=")[1] for part in slug.split(","))
        name = f"{rate}, {temp}"
        rows.append([f"**{name} (pick)**" if slug == s["pick"]["slug"] else name, f3(score), f3(s["pass@n"][slug])])
    gains = [score - four_bit["base"] for score in s["scores"].values()]
    return (
        f"Validation, {count(v['limit'])} problems, n = {n}, T = {v['temperature']:g}, search seed "
        f"{s['search_seed']}:\n\n"
        + table(
            ["setting (lr, training T)", "validation pass@1", f"validation pass@{n}"], rows, ["---", "---:", "---:"]
        )
        + f"\n\nEvery adapter gains {sgn(min(gains))} to {sgn(max(gains))} over the base loaded in 4 bit; on test the "
        f"pick scores {f3(s['test']['pick'])} against the fp32 base's {f3(s['test']['base'])}."
    )
