"""The fair stage's blocks (``results/compare``): the learning signal, the search on validation, the picks on test and
the expectations; also the expectation rows the real study's block shares."""

from __future__ import annotations

from grpo_ext.experiments.study.expectations import held_count
from scripts.doc_blocks.formats import ARM_NAMES, ci, count, f3, lr, seeds, table
from scripts.doc_blocks.registry import renderer


def pick_text(pick: dict) -> str:
    return lr(pick["lr"]) + (f", β {pick['beta']:g}" if "beta" in pick else "")


@renderer("compare_signal", "results/compare/signal.json")
def compare_signal(s: dict) -> str:
    arm_samples = s["settings"]["arm_samples"]
    by = {(r["objective"], r["samples"]): r for r in s["rows"]}
    rows = []
    for n in s["settings"]["samples"]:
        cells = [f"{ci(by[(o, n)], 'mean_cosine')}" for o in ("grpo", "sft")]
        if n == arm_samples:
            rows.append([f"**{count(n)} (the arms)**", f"**{cells[0]}**", cells[1]])
        else:
            rows.append([count(n), *cells])
    arm = by[("grpo", arm_samples)]
    return (
        f"Mean gradient cosine between {s['settings']['minibatches']} independent minibatches of fresh train prompts, "
        f"95% jackknife interval; GRPO with the arm's groups of {s['settings']['num_generations']} at T = "
        f"{s['settings']['temperature']:g} ({arm['zero_std_share']:.0%} of its groups at {count(arm_samples)} samples "
        f"have no reward variance):\n\n" + table(["samples a step", "GRPO", "SFT"], rows, ["---:", "---", "---"])
    )


@renderer("compare_search", "results/compare/search.json")
def compare_search(s: dict) -> str:
    v = s["validation"]
    rates = [g["lr"] for g in s["grid"]["sft"]]
    rows = []
    for arm in ("sft", "rft", "online_rft", "dpo", "grpo_outcome"):
        pick = s["picks"][arm]["slug"]
        cells = []
        for rate in rates:
            slugs = [slug for slug in s["scores"][arm] if slug.split("_")[0] == f"lr{rate:g}"]
            cells.append(
                " / ".join(f"**{f3(s['scores'][arm][x])}**" if x == pick else f3(s["scores"][arm][x]) for x in slugs)
            )
        betas = sorted({g["beta"] for g in s["grid"][arm] if "beta" in g})
        name = ARM_NAMES[arm] + (f", β {' / '.join(f'{b:g}' for b in betas)}" if betas else "")
        rows.append([name + (" (the family's rate)" if arm == "grpo_outcome" else ""), *cells])
    body = table(["arm", *(f"lr {lr(r)}" for r in rates)], rows, ["---", *["---:"] * len(rates)])
    extensions = [a for a, r in s["rate_of"].items()]
    ext = ", ".join(f"{ARM_NAMES[a]} {f3(next(iter(s['scores'][a].values())))}" for a in extensions)
    return (
        f"Validation, {count(v['limit'])} problems x {v['n']}, T = {v['temperature']:g}, search seed "
        f"{s['search_seed']}; "
        f"base pass@1 {f3(s['base'])}; the pick in bold:\n\n{body}\n\n"
        f"The GRPO extension arms, at {lr(s['rate_of'][extensions[0]]['lr'])} (`rate_of: grpo_outcome`): {ext}."
    )


@renderer("compare_test", "results/compare/report.json")
def compare_test(r: dict) -> str:
    k = r["k_max"]
    picks = r["search"]["picks"]
    seeds_ = r["search"]["test_seeds"]
    b = r["base"]
    rows = [
        [
            "base",
            "",
            f"{f3(b['pass@1']['mean'])} [{f3(b['pass@1']['low'])}, {f3(b['pass@1']['high'])}]",
            f3(b[f"maj@{k}"]["mean"]),
            f3(b[f"pass@{k}"]["mean"]),
            "",
        ]
    ]
    for arm, a in r["arms"].items():
        m = a["metrics"]
        rows.append(
            [
                ARM_NAMES[arm],
                pick_text(picks[arm]),
                ci(m["pass@1"], "mean", sign=False),
                f3(m[f"maj@{k}"]["mean"]),
                f3(m[f"pass@{k}"]["mean"]),
                f"{count(a['trained_sequences'][0])} / {count(a['samples_generated'][0])}",
            ]
        )
    return (
        f"Each pick trained at seeds {', '.join(map(str, seeds_))}; means over the seeds with 95% bootstrap intervals "
        f"over problems:\n\n"
        + table(
            ["arm", "pick", "pass@1", f"maj@{k}", f"pass@{k}", "trained / generated samples a seed"],
            rows,
            ["---", "---", "---:", "---:", "---:", "---:"],
        )
    )


def expectation_rows(r: dict) -> list[list[str]]:
    rows = []
    for e in r["expectations"]:
        d = e["difference"]
        measured = ci(d) + f" (seeds {seeds(d['per_seed'])})"
        if e.get("minus"):
            measured = f"({e['metric']} gain) - ({e['minus']} gain) " + measured
        # a question (`question: true`) is answered, not held: its answer in the last column
        held = e["answer"] if e.get("question") else "yes" if e["held"] else "no"
        rows.append([e["text"], measured, e["verdict"], held])
    return rows


@renderer("compare_expectations", "results/compare/report.json")
def compare_expectations(r: dict) -> str:
    held, expected = held_count(r["expectations"])
    body = table(["expectation", "measured (paired, seeds)", "verdict", "held"], expectation_rows(r))
    findings = "; ".join(
        f"{f['claim']}: {f['verdict']} ("
        + (ci(f["pass@1"]) if "pass@1" in f else ", ".join(f"K = {x['k']} {ci(x)}" for x in f["by_k"]))
        + ")"
        for f in r["findings"]
    )
    return f"{held} of {expected} expectations held.\n\n{body}\n\nDeepSeekMath's findings here: {findings}."
