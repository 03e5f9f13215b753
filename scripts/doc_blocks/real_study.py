"""The real-model study's blocks (``results/real_study``: test by arm and operation, expectations, what each arm
trained on, the search's runs on validation) and the withdrawn first result's by-operation table
(``results/real_search``)."""

from __future__ import annotations

from grpo_ext.experiments.study.expectations import held_count
from scripts.doc_blocks.compare import expectation_rows
from scripts.doc_blocks.formats import ARM_NAMES, ci, count, f3, lr, seeds, table
from scripts.doc_blocks.registry import ROOT, load_source, renderer


@renderer("real_study_test", "results/real_study/report.json")
def real_study_test(r: dict) -> str:
    k = 4
    picks = r["search"]["picks"]
    by_slice = {s["value"]: s for s in r["slices"][r["slice_attribute"]]}
    plus, minus = by_slice["+"], by_slice["-"]

    def row(name, key, m, seed_entry=None):
        cells = [name, ci(m["pass@1"], "mean", sign=False)]
        cells.append(seeds(seed_entry["per_seed"], f3) if seed_entry else "")
        cells.append(f"[{f3(seed_entry['low'])}, {f3(seed_entry['high'])}]" if seed_entry else "")
        for s in (plus, minus):
            cells.append(f3(s["base"]) if key == "base" else ci(s["arms"][key]["difference"], bold=True))
        cells += [f3(m[f"maj@{k}"]["mean"]), f3(m[f"pass@{k}"]["mean"])]
        return cells

    rows = [
        row("base (2 worked examples)", "base", r["base"]),
        row("8 worked examples", "fewshot8", r["baselines"]["fewshot8"]),
    ]
    for arm, a in r["arms"].items():
        rate = f"lr {lr(picks[arm]['lr'])}"
        if arm == "dpo":
            rate += f", beta {picks[arm]['beta']:g}"
        name = {"grpo_process": "GRPO process (outcome's lr)", "outcome_refill": "GRPO outcome + refill (outcome's lr)"}
        name = name.get(arm, f"{ARM_NAMES[arm]} ({rate})")
        rows.append(row(name, arm, a["metrics"], r["seeds"][arm]))
    header = ["run", "pass@1 [problems]", "per seed", "over seeds and problems", "`+`", "`-`", f"maj@{k}", f"pass@{k}"]
    return (
        f"{plus['n_problems']} additions and {minus['n_problems']} subtractions; each pick trained with seeds "
        f"{', '.join(map(str, r['search']['test_seeds']))}:\n\n"
        + table(header, rows, ["---", "---:", "---", "---:", "---:", "---:", "---:", "---:"])
    )


@renderer("real_study_expectations", "results/real_study/report.json")
def real_study_expectations(r: dict) -> str:
    rows = expectation_rows(r)
    for e, row in zip(r["expectations"], rows, strict=True):
        if e.get("by_slice"):
            row[1] = "; ".join(f"`{s['value']}` {ci(s['difference'])}" for s in e["by_slice"])
    held, expected = held_count(r["expectations"])
    return f"{held} of {expected} expectations held.\n\n" + table(
        ["expectation", "difference [95% over problems] (seeds)", "verdict", "held"], rows
    )


@renderer("real_study_budget", "results/real_study/report.json")
def real_study_budget(r: dict) -> str:
    def each(a: dict, key: str, digits: int = 0) -> str:
        return " / ".join(count(c[key]) if not digits else f"{c[key]:.{digits}g}" for c in a["counts"])

    rows = [
        [
            ARM_NAMES[arm],
            each(a, "optimizer_steps"),
            each(a, "trained_sequences"),
            each(a, "unique_sequences"),
            each(a, "epochs", 2),
            each(a, "samples_generated"),
        ]
        for arm, a in r["arms"].items()
    ]
    header = ["arm", "optimizer steps", "gradient samples", "unique sequences", "epochs", "generated samples"]
    return "Seeds 0 / 1 / 2 in each cell.\n\n" + table(header, rows)


def _validation(path: str) -> dict:
    return load_source(ROOT, path)


def _accuracy(report: dict, operation: str | None = None) -> list[float]:
    return [
        p["n_correct"] / report["n"]
        for p in report["per_problem"]
        if operation is None or p["attributes"]["operation"] == operation
    ]


@renderer("real_study_validation", "results/real_study/search.json")
def real_study_validation(s: dict) -> str:
    """The search's runs on validation, each from its ``validation.json`` (paired with the base's by problem)."""
    from grpo_ext.evaluation.bootstrap import bootstrap_paired_difference_ci

    v = s["validation"]
    where = "results/real_study"
    base = _validation(f"{where}/base/validation.json")
    runs = [
        ("base (2 worked examples)", base),
        ("8 worked examples", _validation(f"{where}/baselines/fewshot8/validation.json")),
    ]
    for arm, grid in s["grid"].items():
        for slug in s["scores"][arm]:
            setting = next(g for g in grid if slug == "_".join(f"{k}{g[k]:g}" for k in g))
            name = f"{ARM_NAMES[arm]} lr {lr(setting['lr'])}" + (
                f", beta {setting['beta']:g}" if "beta" in setting else ""
            )
            if arm in s.get("rate_of", {}):
                name = f"{ARM_NAMES[arm]} (at {ARM_NAMES[s['rate_of'][arm]['arm']]}'s lr {lr(setting['lr'])})"
            elif slug == s["picks"][arm]["slug"]:
                name = f"**{name}** (pick)"
            runs.append((name, _validation(f"{where}/runs/{arm}/{slug}/seed{s['search_seed']}/validation.json")))
    rows = []
    for name, report in runs:
        d = bootstrap_paired_difference_ci(_accuracy(report), _accuracy(base))
        diff = "" if report is base else ci({"difference": d.estimate, "low": d.low, "high": d.high}, bold=True)
        per_op = [f3(sum(x) / len(x)) for x in (_accuracy(report, "+"), _accuracy(report, "-"))]
        rows.append([name, f3(report["pass@k"]["1"]), diff, *per_op, f"{report['strict_share']:.2f}"])
    header = ["run", "pass@1", "minus the base [95%]", "`+`", "`-`", "strict form"]
    return (
        f"Validation, {v['limit']} problems x {v['n']}, T {v['temperature']:g}, seed {s['search_seed']}; each run's "
        f"`validation.json` in `{where}/runs/<arm>/<setting>/seed{s['search_seed']}/` (read by the renderer too):\n\n"
        + table(header, rows, ["---", "---:", "---:", "---:", "---:", "---:"])
    )


@renderer("real_search_by_operation", "results/real_search/test/report.json")
def real_search_by_operation(r: dict) -> str:
    paired = r["paired_slices"][0]["slices"]["operation"]
    n = r["models"][0]["n"]
    rows = []
    for s in paired:
        d = s["difference"]["pass@k"]
        rows.append(
            [
                f"`{s['value']}`",
                s["n_problems"],
                f3(s["a"]["pass@k"]["1"]),
                f3(s["b"]["pass@k"]["1"]),
                ci(d["1"], bold=True),
                ci(d[str(n)], bold=True),
            ]
        )
    header = ["operation", "problems", "base pass@1", "RL pass@1", "paired difference", f"difference in pass@{n}"]
    return table(header, rows, ["---", "---:", "---:", "---:", "---:", "---:"])
