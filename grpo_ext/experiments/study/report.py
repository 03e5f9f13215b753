"""The report of a study: report.md, report.json, and its plots, from the picked runs' test results.

The expectations written in the study config before the run come first, each with its measured difference and
whether it held; then the learning signal at the base (stage 0, when the study measures it); then every number
comes with its interval (see :mod:`grpo_ext.experiments.study.stats`); the search grid, every validation score and the
picks are printed before any test number, so a reader sees that settings were chosen on validation. Below the test
table, each arm's seeds with intervals over seeds and problems (:mod:`.seeds`: the others resample problems only),
then pass@1 per slice of the test problems (:mod:`grpo_ext.experiments.compare.slices`: each arm against the base per
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

from grpo_ext.evaluation.registry import PASS_AT_1, headline_trio
from grpo_ext.evaluation.slices import known_attributes
from grpo_ext.experiments.compare.slices import arm_slices, arm_slices_markdown
from grpo_ext.experiments.study.anatomy import render_anatomy, study_anatomy
from grpo_ext.experiments.study.answers import answers_markdown, sample_rows, samples_markdown, study_answers
from grpo_ext.experiments.study.budget import estimate
from grpo_ext.experiments.study.config import Setting, Study
from grpo_ext.experiments.study.counts import render_counts, run_counts, same_for_every_arm, sizes_text, spread
from grpo_ext.experiments.study.crossover import arm_crossover, render_crossovers
from grpo_ext.experiments.study.dynamics import plot_dynamics, read_dynamics, render_dynamics, training_steps
from grpo_ext.experiments.study.expectations import judge_expectations, render_expectations
from grpo_ext.experiments.study.hacking import flags, reading, render_hacking, signals
from grpo_ext.experiments.study.hacking import thresholds as hacking_thresholds
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.plots import by_k, model_ks, plot_curves, plot_passk_majk, plot_passk_majk_by_slice
from grpo_ext.experiments.study.seeds import render_seed_spread, seed_spread
from grpo_ext.experiments.study.signal.report_section import read_signal, render_signal
from grpo_ext.experiments.study.spent import render_spent, spent
from grpo_ext.experiments.study.stats import (
    BOOTSTRAP,
    arm_summary,
    finding_text,
    headline_metrics,
    paired_difference,
    paper_findings,
    samples_to_reach,
    why_not_comparable,
)
from grpo_ext.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from grpo_ext.methods.cost import COST_FILE, CURVE_FILE, LOG_FILE, RUN_FILE, read_json_file
from grpo_ext.methods.paradigm import get_method
from grpo_ext.report_format import interval, md_header, md_row, signed_with_seeds

__all__ = ["collect", "read_hacking", "write_study_report"]


def carried_anatomy(previous: dict | None, stats: dict) -> dict | None:
    """The group anatomy of the report before this one (its ``report.json``), where this one cannot compute it (the
    test sample caches it reads are not committed) and the test results are the ones it was computed with: every
    arm's pass@1 and the base's as the previous report has them. None otherwise: a stale diagnostic is not shown."""
    if not previous or not previous.get("anatomy"):
        return None
    before = {name: arm["metrics"][PASS_AT_1]["mean"] for name, arm in (previous.get("arms") or {}).items()}
    now = {name: arm["metrics"][PASS_AT_1]["mean"] for name, arm in stats["arms"].items()}
    base_before = ((previous.get("base") or {}).get(PASS_AT_1) or {}).get("mean")
    if before != now or base_before != stats["base"][PASS_AT_1]["mean"]:
        return None
    return {**previous["anatomy"], "carried_over": True}


def reference_label(study: Study) -> str:
    """The name the report shows for the run its records call ``base`` (e.g. "SFT start" for a study that trains
    every arm from an SFT model); the data keys stay ``base``."""
    return getattr(study, "reference_label", "base")


def _shown(name: str, label: str) -> str:
    return label if name == "base" else name


def _run_counts(arm, folder: Path, result: dict) -> dict:
    """:func:`~grpo_ext.experiments.study.counts.run_counts` of one run folder (its cost record, else the copy in its
    test result), with its training config's group size."""
    method = get_method(arm.method)
    cost = read_json_file(folder, COST_FILE) or result.get("training_cost") or {}
    training = (read_json_file(folder, RUN_FILE) or {}).get("training") or {}
    counts = run_counts(cost, training, method.online, method.sequences_per_example)
    return {**counts, "num_generations": training.get("num_generations") if method.online else None}


def _size(result: dict) -> tuple[int, int]:
    return int(result.get("n_problems", len(result.get("per_problem") or []))), int(result["n"])


def collect(study: Study, out: Path, picks: dict[str, Setting]) -> dict:
    """Test results, learning curves and training counts of every picked run, the test results of the base and the
    baselines (those a run of some arms left unscored are left out), and the problems and n of every validation
    score (the search runs', the base's and the baselines': their records, for the report's words)."""
    arms = {}
    for arm in study.arms:
        folders = [study.run_dir(out, arm, picks[arm.name], seed) for seed in study.seeds]
        results = [json.loads((f / f"{study.test.split}.json").read_text()) for f in folders]
        arms[arm.name] = {
            "results": results,
            "curves": [read_json_file(f, CURVE_FILE) for f in folders],
            "counts": [_run_counts(arm, f, r) for f, r in zip(folders, results, strict=True)],
            "online": get_method(arm.method).online,
        }
    base = json.loads((Path(out) / "base" / f"{study.test.split}.json").read_text())
    files = {b.name: Path(out) / "baselines" / b.name / f"{study.test.split}.json" for b in study.baselines}
    baselines = {name: json.loads(f.read_text()) for name, f in files.items() if f.is_file()}
    split = study.validation.split
    validation = {"base": read_json_file(Path(out) / "base", f"{split}.json")}
    validation |= {b.name: read_json_file(Path(out) / "baselines" / b.name, f"{split}.json") for b in study.baselines}
    for arm, setting, seed in study.searched(out, picks):
        validation[f"{arm.name} {setting.slug}"] = read_json_file(
            study.run_dir(out, arm, setting, seed), f"{split}.json"
        )
    validation_sizes = {name: _size(r) for name, r in validation.items() if r}
    return {"arms": arms, "base": base, "baselines": baselines, "validation_sizes": validation_sizes}


def read_hacking(study: Study, out: str | Path, picks: dict[str, Setting]) -> list[dict]:
    """Every run of the study checked for reward hacking (:mod:`grpo_ext.experiments.study.hacking`): the search runs on
    validation and the picks' test seeds, arm by arm in the study's order, each ``{"arm", "setting", "seed", "role",
    "split", "signals", "flags"}``. The strict form is compared with the base's on the run's split; a run without
    its evaluation file is left out."""
    runs = [(*run, "search") for run in study.searched(out, picks)]
    runs += [(*run, "test") for run in study.test_runs(picks)]
    order = {arm.name: i for i, arm in enumerate(study.arms)}
    splits = {"search": study.validation.split, "test": study.test.split}
    reference = {split: read_json_file(Path(out) / "base", f"{split}.json") or {} for split in splits.values()}
    rows = []
    for arm, setting, seed, role in sorted(runs, key=lambda r: (order[r[0].name], r[3] == "test")):
        folder = study.run_dir(out, arm, setting, seed)
        split = splits[role]
        evaluation = read_json_file(folder, f"{split}.json")
        if evaluation is None:
            continue
        history = read_json_file(folder, LOG_FILE)
        curve = read_json_file(folder, CURVE_FILE) or {}
        training = (read_json_file(folder, RUN_FILE) or {}).get("training") or {}
        online = get_method(arm.method).online  # an offline config's max_completion_length is not its samples' cap
        s = signals(
            training_steps(history) if isinstance(history, list) else None,
            curve.get("points"),
            training.get("max_completion_length") if online else None,
            evaluation.get("strict_share"),
            reference[split].get("strict_share"),
        )
        rows.append(
            {"arm": arm.name, "setting": setting.slug, "seed": seed, "role": role, "split": split, "signals": s}
            | {"flags": (raised := flags(s)), "reading": reading(s, raised)}
        )
    return rows


def _fmt(entry: dict) -> str:
    return interval(entry["mean"], entry["low"], entry["high"])


def _budget(entry: dict) -> list[tuple[int, int]]:
    """(generated, gradient samples) per seed: from the runs' counts (:mod:`.counts`), else the cost record copied
    into each test result (data built without run folders)."""
    if entry.get("counts"):
        return [(c["samples_generated"], c["trained_sequences"]) for c in entry["counts"]]
    costs = [r.get("training_cost") or {} for r in entry["results"]]
    return [(int(c.get("samples_generated", 0)), int(c.get("trained_sequences", 0))) for c in costs]


def compute(study: Study, data: dict) -> dict:
    """Everything the report shows, JSON-ready."""
    k_max = min(r["n"] for a in data["arms"].values() for r in a["results"])
    metrics = headline_metrics(k_max)
    base = {m: v for m, v in arm_summary([data["base"]], metrics).items()}
    baselines = {name: arm_summary([result], metrics) for name, result in data.get("baselines", {}).items()}
    arms = {}
    for name, entry in data["arms"].items():
        budgets = _budget(entry)
        arms[name] = {
            "metrics": arm_summary(entry["results"], metrics),
            "samples_generated": [b[0] for b in budgets],
            "trained_sequences": [b[1] for b in budgets],
            "counts": entry.get("counts"),
            "online": entry.get("online"),
            "below_base": None,
        }
        arms[name]["below_base"] = arms[name]["metrics"][PASS_AT_1]["high"] < base[PASS_AT_1]["mean"]
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
        # the problems and n every model was scored at, from its results: what the report's words say
        "evaluation_sizes": {
            "test": {name: _size(runs[0]) for name, runs in models.items()},
            "validation": data.get("validation_sizes") or {},
        },
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


def _budget_text(stats: dict) -> str:
    """The design's sentence on what the arms trained on, from the runs' counts: one budget when every run of every
    arm shares it, else each arm's (a range over its seeds)."""
    counts = {name: arm["counts"] for name, arm in stats["arms"].items() if arm.get("counts")}
    if not counts:
        return "Each arm's generated and gradient samples are in the test table."
    shared = {k: same_for_every_arm(counts, k) for k in ("samples_generated", "trained_sequences", "optimizer_steps")}
    if None not in shared.values():
        return (
            f"Every arm trained on the same budget, by its runs' records: {shared['samples_generated']} generated and "
            f"{shared['trained_sequences']} gradient samples in {shared['optimizer_steps']} optimizer steps (below)."
        )
    arms = "; ".join(
        f"{name} {spread([r['samples_generated'] for r in runs])} generated, "
        f"{spread([r['trained_sequences'] for r in runs])} gradient samples, "
        f"{spread([r['optimizer_steps'] for r in runs])} optimizer steps"
        for name, runs in counts.items()
    )
    return f"The arms' budgets differ, by their runs' records (a range spans the seeds; table below): {arms}."


def _start_text(study: Study, record: dict | None) -> str:
    """Where every arm starts: the base, or the study's start as its record (``start.json``, in search.json) says."""
    if study.start is None or record is None:
        return f"Base: `{study.base}`. Every arm starts from it."
    argv = record["command"]["argv"]
    flags = {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}  # the last wins
    size = record["train_prompts"]["size"]
    trained = record.get("trained") or {}  # what its run's records say happened
    steps = trained.get("optimizer_steps", "?")
    return (
        f"Base: `{study.base}`. Every arm starts from the study's {record.get('label', study.start.label)}: "
        f"{study.start.method} of the base on the reference solutions of the first {size} train prompts "
        f"({trained.get('trained_sequences', '?')} gradient samples in {steps} optimizer steps at learning rate "
        f"{flags.get('learning_rate', '?')}), its adapter merged into a bf16 copy of the base (weights sha256 "
        f"`{record['model_sha256'][:12]}`); the arms train a fresh LoRA adapter on it, on the train prompts after "
        f"those {size}, and it is the reference model wherever one is used. The row `{study.reference_label}` is "
        "that model; the raw base is scored beside it for context."
    )


def _seeds_text(study: Study) -> str:
    seeds = list(study.search_seeds)
    if len(seeds) == 1:
        return f"Every search run is trained with seed {seeds[0]}"
    return (
        f"Every search run is trained with each of the seeds {', '.join(map(str, seeds))} (a setting's score is "
        "the mean over them; an arm with one setting is not searched: nothing to pick)"
    )


def _design(study: Study, stats: dict | None = None, start: dict | None = None) -> str:
    """The paragraph that says how the arms were searched, picked and tested; its counts come from the records
    (``stats``: :func:`compute`; ``start``: the start's record), the study config's only where a study reported
    before them lacks them."""
    stats = stats or {"arms": {}}
    sizes = stats.get("evaluation_sizes") or {}
    validation = study.validation
    if sizes.get("validation"):
        scored_on = sizes_text(sizes["validation"], validation.split)
    else:
        scored_on = f"{validation.limit} `{validation.split}` problems (n = {validation.n})"
    if sizes.get("test"):
        label = reference_label(study)
        tested_on = sizes_text({_shown(k, label): v for k, v in sizes["test"].items()}, study.test.split)
    else:
        tested_on = f"{study.test.limit} `{study.test.split}` problems (n = {study.test.n})"
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
        f"{_start_text(study, start)} {_budget_text(stats)} The arms without `rate_of` get the "
        f"same learning-rate search ({', '.join(f'{x:g}' for x in study.learning_rates)}; DPO also searches "
        f"beta).{rates} {_seeds_text(study)} and scored on {scored_on}, at "
        f"T = {validation.temperature} ({validation.metric}). Each arm's best setting on validation is trained with "
        f"seeds {', '.join(map(str, study.seeds))} (the search seed is none of them) and evaluated on {tested_on}, "
        f"at T = {study.test.temperature}; test numbers exist only for picked settings. Learning curves are scored "
        "on validation prompts."
    )


def _extension_budgets(stats: dict) -> str:
    """Each extension's generated samples and optimizer steps beside its reference arm's, from the runs' counts (a
    range spans the seeds): whether they trained on the same budget, by the records."""
    texts = []
    for ext in stats["extensions"].values():
        if not all(ext[k] in stats["arms"] for k in ("arm", "against")):
            continue  # stats without the arms' budgets say nothing of them
        arms = {ext[k]: stats["arms"][ext[k]] for k in ("arm", "against")}
        generated = {name: sorted(set(arm["samples_generated"])) for name, arm in arms.items()}
        same = len({tuple(g) for g in generated.values()}) == 1 and len(generated[ext["arm"]]) == 1
        each = ", ".join(
            f"{name} {spread(arm['samples_generated'])} in "
            f"{spread([c['optimizer_steps'] for c in arm.get('counts') or []])} optimizer steps"
            for name, arm in arms.items()
        )
        texts.append(f"{ext['arm']} - {ext['against']}: {'the same' if same else '**not the same**'} ({each})")
    if not texts:
        return ""
    return (
        "Generated samples, by the runs' records (a range spans the seeds; a refill run made before the trainer's "
        "`refill_allowance` could pass the budget within its last step): " + "; ".join(texts) + "."
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
    hacking: list | None = None,
) -> str:
    k = stats["k_max"]
    start = reference_label(study)  # the name shown for the run called base
    headline = headline_trio(k)  # the columns of the test tables, in this order: pass@1, maj@k, pass@k
    lines = [
        "# The fair stage: every arm tuned on validation, tested on held-out problems",
        "",
        *render_expectations(stats["expectations"], start),
        "## Design",
        "",
        _design(study, stats, search.get("start")),
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
        lines.append(f"| {start} | - | {search['base']:.3f} |")
    for name, score in search.get("baselines", {}).items():
        lines.append(f"| {name} (baseline) | - | {score:.3f} |")
    for arm, scores in search["scores"].items():
        reference = search.get("rate_of", {}).get(arm)
        label = f"{arm} (at {reference['arm']}'s rate)" if reference else arm
        for slug, score in scores.items():
            mark = " **(pick)**" if search["picks"][arm]["slug"] == slug else ""
            lines.append(f"| {label} | {slug}{mark} | {score:.3f} |")
        if not scores:  # one setting: its pick without a search run
            lines.append(f"| {label} | {search['picks'][arm]['slug']} **(pick)** | not searched (one setting) |")
    lines += [
        "",
        "## Test results of the picks",
        "",
        *md_header(["arm", "pick", *headline_trio(k), "generated samples", "gradient samples"], "llrrrrr"),
        md_row([start, "-", *(_fmt(stats["base"][x]) for x in headline), "-", "-"]),
    ]
    for name, m in stats.get("baselines", {}).items():
        lines.append(md_row([f"{name} (baseline)", "-", *(_fmt(m[x]) for x in headline), "-", "-"]))
    flagged = {}  # an arm's test seeds with a reward-hacking flag (the section below)
    for run in hacking or []:
        if run["role"] == "test":
            flagged.setdefault(run["arm"], []).append(bool(run["flags"]))
    for name, arm in stats["arms"].items():
        m = arm["metrics"]
        notes = [f"below {start}"] if arm["below_base"] else []
        if any(flagged.get(name, [])):
            notes.append(f"hacking flags: {sum(flagged[name])} of {len(flagged[name])} seeds")
        note = f" ({'; '.join(notes)})" if notes else ""
        budgets = [spread(arm[b]) for b in ("samples_generated", "trained_sequences")]
        lines.append(
            md_row([f"{name}{note}", search["picks"][name]["slug"], *(_fmt(m[x]) for x in headline), *budgets])
        )
    lines.append("")
    counts = {
        name: {"runs": arm["counts"], "online": arm["online"], "num_generations": arm["counts"][0]["num_generations"]}
        for name, arm in stats["arms"].items()
        if arm.get("counts")
    }
    if counts:  # studies reported from results alone (no run folders) lack them
        lines += render_counts(counts)
    if hacking is not None:
        lines += render_hacking(hacking, start)
    lines += render_seed_spread(stats.get("seeds") or {})  # studies reported before it lack it
    lines += arm_slices_markdown(stats.get("slices") or {})  # studies reported before slices lack them
    lines += [
        "## Each extension against its vanilla arm",
        "",
        f"{_extension_budgets(stats)} The last column compares the two at equal generated samples, on their "
        "validation learning curves.".strip(),
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
        "Verdict rule (`grpo_ext.experiments.study.stats`): *agrees* when the 95% interval of the paired difference "
        "is above 0 and every seed's difference is positive; *disagrees* when the interval is below 0 and every "
        "seed negative; *inconclusive* otherwise.",
        "",
        *md_header(["finding", "verdict", "numbers"], "lll"),
    ]
    for f in stats["findings"]:
        lines.append(md_row([f["claim"], f"**{f['verdict']}**", finding_text(f)]))
    lines.append("")
    lines += render_crossovers(stats.get("crossovers") or {})  # studies reported before crossovers lack them
    answers = {_shown(name, start): a for name, a in (stats.get("answers") or {}).items()}
    lines += answers_markdown(answers, stats.get("slice_attribute"), stats.get("strict_form"))
    if anatomy is not None:
        lines += render_anatomy(anatomy, start)
    if dynamics is not None:
        lines += render_dynamics(dynamics)
    samples = [{**r, "model": _shown(r["model"], start)} for r in stats.get("samples") or []]
    lines += samples_markdown(samples, stats.get("slice_attribute"))
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
    if anatomy is None:
        anatomy = carried_anatomy(read_json_file(out, "report.json"), stats)
    # only a study that measures the signal shows it: a file a run of other arms left in `out` is not this run's
    signal = read_signal(out) if study.signal is not None else None
    cost = render_spent(spent(study, out), estimate(study) if study.budget else None)
    dynamics = read_dynamics(study, out, picks)  # the online runs' training logs: search runs and test seeds
    hacking = read_hacking(study, out, picks)  # every run's records checked for reward hacking
    models = {
        "base": [data["base"]],
        **{name: [result] for name, result in data["baselines"].items()},
        **{name: entry["results"] for name, entry in data["arms"].items()},
    }
    stats_by_k = {name: by_k(results, model_ks(results)) for name, results in models.items()}
    label = reference_label(study)  # the plots' name for the base; report.json keeps its key
    paths = {
        "md": atomic_write_text(
            out / "report.md", render(study, search, stats, command, anatomy, signal, cost, dynamics, hacking)
        ),
        "json": atomic_write_json(
            out / "report.json",
            {
                "search": search,
                **stats,
                "by_k": stats_by_k,
                "anatomy": anatomy,
                "signal": signal,
                "dynamics": dynamics,
                "hacking": {"thresholds": hacking_thresholds(), "runs": hacking},
            },
        ),
        "curves": atomic_write_bytes(out / "curves.png", plot_curves(data)),
        "passk_majk": atomic_write_bytes(
            out / "passk_majk.png", plot_passk_majk({_shown(k, label): v for k, v in stats_by_k.items()})
        ),
    }
    if stats["slice_attribute"]:
        shown = {_shown(k, label): v for k, v in models.items()}
        figure = plot_passk_majk_by_slice(shown, stats["slice_attribute"])
        paths["passk_majk_by_slice"] = atomic_write_bytes(out / "passk_majk_by_slice.png", figure)
    figure = plot_dynamics(dynamics)
    if figure is not None:
        paths["dynamics"] = atomic_write_bytes(out / "dynamics.png", figure)
    return paths
