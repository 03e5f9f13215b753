"""report.md of a study: its sections in order, rendered from the numbers :func:`~.report.compute` made.

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
Pure: text from numbers, nothing read or written.
"""

from __future__ import annotations

from grpo_ext.evaluation.registry import headline_trio
from grpo_ext.experiments.compare.slices import arm_slices_markdown
from grpo_ext.experiments.study.anatomy import render_anatomy
from grpo_ext.experiments.study.answers import answers_markdown, samples_markdown
from grpo_ext.experiments.study.config import Study
from grpo_ext.experiments.study.counts import render_counts, same_for_every_arm, sizes_text, spread
from grpo_ext.experiments.study.crossover import render_crossovers
from grpo_ext.experiments.study.dynamics import render_dynamics
from grpo_ext.experiments.study.expectations import render_expectations
from grpo_ext.experiments.study.hacking import render_hacking
from grpo_ext.experiments.study.seeds import render_seed_spread
from grpo_ext.experiments.study.signal.report_section import render_signal
from grpo_ext.experiments.study.stats import BOOTSTRAP, finding_text
from grpo_ext.report_format import interval, md_header, md_row, signed_with_seeds

__all__ = ["rate_text", "reference_label", "render", "shown_as"]


def reference_label(study: Study) -> str:
    """The name the report shows for the run its records call ``base`` (e.g. "SFT start" for a study that trains
    every arm from an SFT model); the data keys stay ``base``."""
    return getattr(study, "reference_label", "base")


def shown_as(name: str, label: str) -> str:
    """The name a table or plot shows for a model: the reference label for the run called ``base``."""
    return label if name == "base" else name


def _fmt(entry: dict) -> str:
    return interval(entry["mean"], entry["low"], entry["high"])


def _cell(metrics: dict, metric: str) -> str:
    """A test table's cell: ``-`` for a metric the model was not scored at (a baseline drawn fewer samples a problem
    than the arms' K)."""
    return _fmt(metrics[metric]) if metric in metrics else "-"


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


def _searched_axes(study: Study) -> str:
    """The axes other than the learning rate that an arm searches (its `grid`, more than one value), e.g. "; dpo
    also searches beta (0.03, 0.1, 0.3)"; "" when none does."""
    axes = [
        f"{arm.name} also searches {axis} ({', '.join(f'{v:g}' for v in values)})"
        for arm in study.arms
        if arm.rate_of is None
        for axis, values in arm.grid.items()
        if len(values) > 1
    ]
    return "".join(f"; {text}" for text in axes)


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
        tested_on = sizes_text({shown_as(k, label): v for k, v in sizes["test"].items()}, study.test.split)
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
        f"same learning-rate search ({', '.join(f'{x:g}' for x in study.learning_rates)}{_searched_axes(study)})."
        f"{rates} {_seeds_text(study)} and scored on {scored_on}, at "
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
        md_row([start, "-", *(_cell(stats["base"], x) for x in headline), "-", "-"]),
    ]
    for name, m in stats.get("baselines", {}).items():
        lines.append(md_row([f"{name} (baseline)", "-", *(_cell(m, x) for x in headline), "-", "-"]))
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
    # what each baseline in the table is (the raw base with worked examples...): the study's words for it
    described = [b for b in study.baselines if b.text and b.name in stats.get("baselines", {})]
    lines += [*(f"- {b.name} (baseline): {b.text}" for b in described), *([""] if described else [])]
    counts = {
        name: {"runs": arm["counts"], "online": arm["online"], "num_generations": arm["counts"][0]["num_generations"]}
        for name, arm in stats["arms"].items()
        if arm.get("counts")
    }
    if counts:  # studies reported from results alone (no run folders) lack them
        lines += render_counts(counts)
    if hacking is not None:
        lines += render_hacking(hacking, start)
    lines += render_seed_spread(stats.get("seeds") or {}, start)  # studies reported before it lack it
    lines += arm_slices_markdown(stats.get("slices") or {}, reference_label=start)  # reports before slices lack them
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
    lines += render_crossovers(stats.get("crossovers") or {}, start)  # studies reported before crossovers lack them
    answers = {shown_as(name, start): a for name, a in (stats.get("answers") or {}).items()}
    lines += answers_markdown(answers, stats.get("slice_attribute"), stats.get("strict_form"))
    if anatomy is not None:
        lines += render_anatomy(anatomy, start)
    if dynamics is not None:
        lines += render_dynamics(dynamics)
    samples = [{**r, "model": shown_as(r["model"], start)} for r in stats.get("samples") or []]
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
