"""The iterative-RL block (``results/iterative``): each arm's test pass@1 from the base to the last iteration, paired
with the base by problem."""

from __future__ import annotations

from scripts.doc_blocks.formats import ci, f3, seeds, table
from scripts.doc_blocks.registry import renderer

ITERATIVE_REWARDS = {
    "verifier": "the rule-based step verifier",
    "iterative": "PRM retrained every iteration",
    "frozen": "PRM_0 kept",
}


@renderer("iterative", "results/iterative/report.json")
def iterative(r: dict) -> str:
    s = r["summary"]
    rows = []
    for arm in ("verifier", "iterative", "frozen"):
        a = s["against_base"][arm]
        means = s["means"][arm]
        first, last = means[0], means[-1]
        mean = a["mean"]
        rows.append(
            [
                arm,
                ITERATIVE_REWARDS[arm],
                f"{f3(first['pass@1']['mean'])} → {f3(last['pass@1']['mean'])}",
                ci(mean, "estimate", bold=True),
                seeds(x["estimate"] for x in a["per_seed"].values()),
            ]
        )
    return (
        f"Test pass@1, iteration {means[-1]['iteration']} minus the base (paired by problem, mean of "
        f"{means[-1]['seeds']} seeds):\n\n"
        + table(["arm", "reward", f"base → iteration {means[-1]['iteration']}", "change [95% CI]", "seeds"], rows)
    )
