"""The report of a study: report.md, report.json, and its plots, from the picked runs' test results.

The expectations written in the study config before the run come first, each with its measured difference and
whether it held; then the learning signal at the base (stage 0, when the study measures it); then every number
comes with its interval (see :mod:`grpo_ext.methods.study.stats`); the search grid, every validation score and the
picks are printed before any test number, so a reader sees that settings were chosen on validation. Below the test
table, each arm's seeds with intervals over seeds and problems (:mod:`.seeds`: the others resample problems only),
then pass@1 per slice of the test problems (:mod:`grpo_ext.methods.compare.slices`: each arm against the base per
operation, number of operands...), so a gain that is one kind of problem only shows as such; after the paper's
findings, where the base's pass@k catches up with each arm's (:mod:`.crossover`); then what the samples
say (the answer format and the content-first failure anatomy, whole and per slice: :mod:`.answers`), how the online
runs trained step by step (:mod:`.dynamics`, from their training logs) and a few samples.
The baselines (the base at another prompt: no training) sit beside the base in every table, plot and expectation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from grpo_ext.evaluation.slices import known_attributes
from grpo_ext.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from grpo_ext.methods.compare.slices import arm_slices, arm_slices_markdown
from grpo_ext.methods.cost import CURVE_FILE, read_json_file
from grpo_ext.methods.study.anatomy import render_anatomy, study_anatomy
from grpo_ext.methods.study.answers import answers_markdown, sample_rows, samples_markdown, study_answers
from grpo_ext.methods.study.budget import estimate
from grpo_ext.methods.study.config import Setting, Study
from grpo_ext.methods.study.crossover import arm_crossover, render_crossovers
from grpo_ext.methods.study.dynamics import plot_dynamics, read_dynamics, render_dynamics
from grpo_ext.methods.study.expectations import judge_expectations, render_expectations
from grpo_ext.methods.study.options import StudyOptions
from grpo_ext.methods.study.plots import by_k, model_ks, plot_curves, plot_passk_majk, plot_passk_majk_by_slice
from grpo_ext.methods.study.seeds import render_seed_spread, seed_spread
from grpo_ext.methods.study.signal.report_section import read_signal, render_signal
from grpo_ext.methods.study.spent import render_spent, spent
from grpo_ext.methods.study.stats import (
    BOOTSTRAP,
    arm_summary,
    finding_text,
    headline_metrics,
    paired_difference,
    paper_findings,
    samples_to_reach,
    why_not_comparable,
)
from grpo_ext.report_format import interval, md_header, md_row, signed_with_seeds

__all__ = ["collect", "write_study_report"]


def collect(study: Study, out: Path, picks: dict[str, Setting]) -> dict:
    """Test results and learning curves of every picked run, and the test results of the base and the baselines
    (those a run of some arms left unscored are left out)."""
    arms = {}
    for arm in study.arms:
        folders = [study.run_dir(out, arm, picks[arm.name], seed) for seed in study.seeds]
        arms[arm.name] = {
            "results": [json.loads((f / f"{study.test.split}.json").read_text()) for f in folders],
            "curves": [read_json_file(f, CURVE_FILE) for f in folders],
        }
    base = json.loads((Path(out) / "base" / f"{study.test.split}.json").read_text())
    files = {b.name: Path(out) / "baselines" / b.name / f"{study.test.split}.json" for b in study.baselines}
    baselines = {name: json.loads(f.read_text()) for name, f in files.items() if f.is_file()}
    return {"arms": arms, "base": base, "baselines": baselines}


def _fmt(entry: dict) -> str:
    return interval(entry["mean"], entry["low"], entry["high"])


def _budget(result: dict) -> tuple[int, int]:
    cost = result.get("training_cost") or {}
    return int(cost.get("samples_generated", 0)), int(cost.get("trained_sequences", 0))


def compute(study: Study, data: dict) -> dict:
    """Everything the report shows, JSON-ready."""
    k_max = min(r["n"] for a in data["arms"].values() for r in a["results"])
    metrics = headline_metrics(k_max)
    base = {m: v for m, v in arm_summary([data["base"]], metrics).items()}
    baselines = {name: arm_summary([result], metrics) for name, result in data.get("baselines", {}).items()}
    arms = {}
    for name, entry in data["arms"].items():
        budgets = [_budget(r) for r in entry["results"]]
        arms[name] = {
            "metrics": arm_summary(entry["results"], metrics),
            "samples_generated": [b[0] for b in budgets],
            "trained_sequences": [b[1] for b in budgets],
            "below_base": None,
        }
        arms[name]["below_base"] = arms[name]["metrics"]["pass@1"]["high"] < base["pass@1"]["mean"]
    extensions = {}
    for label, spec in study.extensions.items():
        if spec["arm"] not in data["arms"] or spec["against"] not in data["arms"]:
            continue  # a run of some arms only (--arms)
        a, b = data["arms"][spec["arm"]], data["arms"][spec["against"]]
        reach = _reach(a["curves"], b["curves"])
        extensions[label] = {
            **spec,
            "differences": {m: paired_difference(a["results"], b["results"], m) for m in metrics},
            **reach,
        }
    results = {name: entry["results"] for name, entry in data["arms"].items()}
    singles = {name: [result] for name, result in data.get("baselines", {}).items()}
    # those a run left without per-problem records, or scored on other problems, have no seeds or crossover section
    comparable = {
        name: runs for name, runs in {**singles, **results}.items() if why_not_comparable(runs, [data["base"]]) is None
    }
    models = {"base": [data["base"]], **singles, **results}
    attribute = slice_attribute(study, data["base"])
    # the arms a run left out (--arms) are not findings of it: only measured ones are listed
    findings = [f for f in paper_findings(results, data["base"]) if f["verdict"] != "not measured"]
    return {
        "expectations": judge_expectations(study.expectations, results, data["base"], data.get("baselines")),
        "k_max": k_max,
        "metrics": metrics,
        "base": base,
        "baselines": baselines,
        "arms": arms,
        "extensions": extensions,
        "findings": findings,
        # pass@1 per slice of the test problems (the operation, the operands...): every attribute they carry
        "slices": arm_slices({**singles, **results}, data["base"]),
        # each arm's seeds, with intervals over seeds and problems (the rest resample problems only)
        "seeds": seed_spread({name: runs for name, runs in comparable.items() if name in results}, data["base"]),
        "crossovers": {name: arm_crossover(runs, data["base"]) for name, runs in comparable.items()},
        "slice_attribute": attribute,
        "answers": study_answers(models, attribute),
        "strict_form": data["base"].get("strict_form"),
        "samples": sample_rows(models, attribute),
        "bootstrap": BOOTSTRAP,
    }


def slice_attribute(study: Study, base: dict) -> str | None:
    """The attribute the answers section and the per-slice plot split by: the one the expectations judge on each
    value of (``slices``), else the first one the test problems carry; None without any."""
    known = known_attributes([base])
    wanted = [e.slices for e in study.expectations.values() if e.slices] + known
    return next((a for a in wanted if a in known), None)


def _reach(curves_a: list, curves_b: list) -> dict:
    """Samples arm A needs to reach arm B's final curve pass@1 (mean over B's seeds), per A seed, and the ratio to
    the samples B generated."""
    curves_a, curves_b = [c for c in curves_a if c], [c for c in curves_b if c]
    if not curves_a or not curves_b or "samples_generated" not in curves_b[0]["points"][-1]:
        return {"reach": None}
    target = float(np.mean([c["points"][-1]["eval/pass@1"] for c in curves_b]))
    spent = float(np.mean([c["points"][-1]["samples_generated"] for c in curves_b]))
    start = float(np.mean([c["points"][0]["eval/pass@1"] for c in curves_b]))
    if target <= start:  # the reference never rose above its start: every curve "reaches" it at 0 samples
        return {"reach": {"target_pass@1": target, "reference_start": start, "reference_samples": spent, "ratio": None}}
    per_seed = [samples_to_reach(c["points"], target) for c in curves_a]
    reached = [s for s in per_seed if s is not None]
    ratio = float(np.mean(reached)) / spent if reached and len(reached) == len(per_seed) and spent else None
    return {"reach": {"target_pass@1": target, "reference_samples": spent, "per_seed": per_seed, "ratio": ratio}}


def rate_text(search: dict, arm: str, against: str) -> str:
    """Whether an extension ran at its reference's learning rate, and whose pick that rate was (search.json's
    ``rate_of``; an arm without one picked its own)."""
    lr = {name: search["picks"][name]["lr"] for name in (arm, against)}
    source = {name: search.get("rate_of", {}).get(name, {}).get("arm", name) for name in (arm, against)}
    if lr[arm] == lr[against]:
        return f"at its reference's rate: {lr[arm]:g} ({source[arm]}'s pick)"
    return (
        f"**not at its reference's rate**: {lr[arm]:g} ({source[arm]}'s pick) against {lr[against]:g} "
        f"({source[against]}'s pick)"
    )


def _design(study: Study) -> str:
    """The paragraph that says how the arms were searched, picked and tested."""
    shared: dict[str, list[str]] = {}
    for arm in study.arms:
        if arm.rate_of is not None:
            shared.setdefault(arm.rate_of, []).append(arm.name)
    rates = "".join(
        f" {', '.join(names)} train at {reference}'s picked rate (`rate_of`: no search of their own rate; other "
        "axes, if any, searched at that rate)."
        for reference, names in shared.items()
    )
    return (
        f"Base: `{study.base}`. Every arm starts from it with the same budget of generated and gradient samples "
        f"(below). The arms without `rate_of` get the same learning-rate search "
        f"({', '.join(f'{x:g}' for x in study.learning_rates)}; DPO also searches beta).{rates} Every search run "
        f"is trained with seed {study.search_seed} and scored on {study.validation.limit} "
        f"`{study.validation.split}` problems (n = {study.validation.n}, T = {study.validation.temperature}, "
        f"{study.validation.metric}). Each arm's best setting on validation is trained with seeds "
        f"{', '.join(map(str, study.seeds))} (the search seed is none of them) and evaluated on {study.test.limit} "
        f"`{study.test.split}` problems (n = {study.test.n}, T = {study.test.temperature}); test numbers exist only "
        "for picked settings. Learning curves are scored on validation prompts."
    )


def render(
    study: Study,
    search: dict,
    stats: dict,
    command: str | None,
    anatomy: dict | None = None,
    signal: dict | None = None,
    cost: str | None = None,
    dynamics: list | None = None,
) -> str:
    k = stats["k_max"]
    headline = ["pass@1", f"maj@{k}", f"pass@{k}"]  # the columns of the test tables, in this order
    lines = [
        "# The fair stage: every arm tuned on validation, tested on held-out problems",
        "",
        *render_expectations(stats["expectations"]),
        "## Design",
        "",
        _design(study),
        "",
        f"Intervals: 95% percentile bootstrap over the test problems ({BOOTSTRAP['n_resamples']:,} resamples, seed "
        f"{BOOTSTRAP['seed']}) of the per-problem value averaged over seeds; differences are paired by problem. "
        "Seed values are listed beside them, and a difference's interval *over seeds and problems* (a two-level "
        "bootstrap that resamples each arm's seeds too: wider where seeds disagree; shown, not part of a verdict).",
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    if signal is not None:  # stage 0, measured before the search
        lines += render_signal(signal)
    lines += [
        "## Search (validation)",
        "",
        *md_header(["arm", "setting", study.validation.metric], "llr"),
    ]
    if "base" in search:  # studies searched before the base was scored on validation lack it
        lines.append(f"| base | - | {search['base']:.3f} |")
    for name, score in search.get("baselines", {}).items():
        lines.append(f"| {name} (baseline) | - | {score:.3f} |")
    for arm, scores in search["scores"].items():
        reference = search.get("rate_of", {}).get(arm)
        label = f"{arm} (at {reference['arm']}'s rate)" if reference else arm
        for slug, score in scores.items():
            mark = " **(pick)**" if search["picks"][arm]["slug"] == slug else ""
            lines.append(f"| {label} | {slug}{mark} | {score:.3f} |")
    lines += [
        "",
        "## Test results of the picks",
        "",
        *md_header(
            ["arm", "pick", "pass@1", f"maj@{k}", f"pass@{k}", "generated samples", "gradient samples"], "llrrrrr"
        ),
        md_row(["base", "-", *(_fmt(stats["base"][x]) for x in headline), "-", "-"]),
    ]
    for name, m in stats.get("baselines", {}).items():
        lines.append(md_row([f"{name} (baseline)", "-", *(_fmt(m[x]) for x in headline), "-", "-"]))
    for name, arm in stats["arms"].items():
        m = arm["metrics"]
        flag = " (below base)" if arm["below_base"] else ""
        budgets = ["/".join(map(str, sorted(set(arm[b])))) for b in ("samples_generated", "trained_sequences")]
        lines.append(
            md_row([f"{name}{flag}", search["picks"][name]["slug"], *(_fmt(m[x]) for x in headline), *budgets])
        )
    lines += ["", *render_seed_spread(stats.get("seeds") or {})]  # studies reported before it lack it
    lines += arm_slices_markdown(stats.get("slices") or {})  # studies reported before slices lack them
    lines += [
        "## Each extension against its vanilla arm (the same sample budget)",
        "",
        "Both arms stop at the same budget of generated samples (a refill run made before the trainer's "
        "`refill_allowance` could pass it within its last step: each arm's generated samples are in the test table). "
        "The last column compares the two at equal generated samples, on their validation learning curves.",
        "",
        *md_header(
            [
                "extension",
                "arm - reference",
                "learning rate",
                *headline,
                "samples to reach the reference's final pass@1 (validation curves)",
            ],
            "lllllll",
        ),
    ]
    for label, ext in stats["extensions"].items():
        d = ext["differences"]
        reach = ext.get("reach")
        if reach is None:
            reach_text = "no curves"
        elif "reference_start" in reach:
            reach_text = (
                f"undefined: the reference's final curve pass@1 ({reach['target_pass@1']:.3f}) is not above its "
                f"start ({reach['reference_start']:.3f})"
            )
        else:
            seeds = ", ".join("not reached" if s is None else f"{s:,.0f}" for s in reach["per_seed"])
            ratio = f"{reach['ratio']:.2f}x" if reach["ratio"] is not None else "not reached in every seed"
            reach_text = f"{ratio} of {reach['reference_samples']:,.0f} (seeds: {seeds})"
        rate = rate_text(search, ext["arm"], ext["against"])
        diffs = [signed_with_seeds(d[x]) for x in headline]
        lines.append(md_row([label, f"{ext['arm']} - {ext['against']}", rate, *diffs, reach_text]))
    lines += [
        "",
        "## DeepSeekMath's findings on this stage",
        "",
        "Verdict rule (`grpo_ext.methods.study.stats`): *agrees* when the 95% interval of the paired difference "
        "is above 0 and every seed's difference is positive; *disagrees* when the interval is below 0 and every "
        "seed negative; *inconclusive* otherwise.",
        "",
        *md_header(["finding", "verdict", "numbers"], "lll"),
    ]
    for f in stats["findings"]:
        lines.append(md_row([f["claim"], f"**{f['verdict']}**", finding_text(f)]))
    lines.append("")
    lines += render_crossovers(stats.get("crossovers") or {})  # studies reported before crossovers lack them
    lines += answers_markdown(stats.get("answers") or {}, stats.get("slice_attribute"), stats.get("strict_form"))
    if anatomy is not None:
        lines += render_anatomy(anatomy)
    if dynamics is not None:
        lines += render_dynamics(dynamics)
    lines += samples_markdown(stats.get("samples") or [], stats.get("slice_attribute"))
    if cost:
        lines += ["## Cost (measured)", "", cost, ""]
    lines += [
        "## Plots",
        "",
        "![validation pass@1 of the learning curves against generated samples](curves.png)",
        "",
        "![pass@k and maj@k of the picks](passk_majk.png)",
        "",
    ]
    if stats.get("slice_attribute"):
        lines += [f"![pass@k and maj@k of the picks per {stats['slice_attribute']}](passk_majk_by_slice.png)", ""]
    if dynamics:
        lines += ["![completion length and zero-std share per step of the online runs](dynamics.png)", ""]
    return "\n".join(lines)


def write_study_report(
    study: Study,
    out: str | Path,
    picks: dict[str, Setting],
    options: StudyOptions | None = None,
    command: str | None = None,
) -> dict:
    """report.md, report.json and the plots of a finished study in `out`; the anatomy section only with the driver's
    `options` (the folder of its method configs); `command`, the one that reproduces it, in the report."""
    out = Path(out)
    search = json.loads((out / "search.json").read_text())
    data = collect(study, out, picks)
    stats = compute(study, data)
    anatomy = study_anatomy(study, out, picks, options.configs) if options is not None else None
    # only a study that measures the signal shows it: a file a run of other arms left in `out` is not this run's
    signal = read_signal(out) if study.signal is not None else None
    cost = render_spent(spent(study, out), estimate(study) if study.budget else None)
    dynamics = read_dynamics(study, out, picks)  # the online runs' training logs: search runs and test seeds
    models = {
        "base": [data["base"]],
        **{name: [result] for name, result in data["baselines"].items()},
        **{name: entry["results"] for name, entry in data["arms"].items()},
    }
    stats_by_k = {name: by_k(results, model_ks(results)) for name, results in models.items()}
    paths = {
        "md": atomic_write_text(
            out / "report.md", render(study, search, stats, command, anatomy, signal, cost, dynamics)
        ),
        "json": atomic_write_json(
            out / "report.json",
            {"search": search, **stats, "by_k": stats_by_k, "anatomy": anatomy, "signal": signal, "dynamics": dynamics},
        ),
        "curves": atomic_write_bytes(out / "curves.png", plot_curves(data)),
        "passk_majk": atomic_write_bytes(out / "passk_majk.png", plot_passk_majk(stats_by_k)),
    }
    if stats["slice_attribute"]:
        figure = plot_passk_majk_by_slice(models, stats["slice_attribute"])
        paths["passk_majk_by_slice"] = atomic_write_bytes(out / "passk_majk_by_slice.png", figure)
    figure = plot_dynamics(dynamics)
    if figure is not None:
        paths["dynamics"] = atomic_write_bytes(out / "dynamics.png", figure)
    return paths
