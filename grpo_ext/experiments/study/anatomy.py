"""Where a group's learning signal comes from: the diagnostic behind the study's findings.

GRPO learns only from groups whose rewards differ. With a right/wrong outcome reward that is a *mixed* group (some
samples right, some wrong); an all-right or all-wrong group gives zero advantages (TRL's ``frac_reward_zero_std``).
Process supervision adds signal in two places only: all-wrong groups whose step scores still differ (outcome has
nothing there), and the correct prefix of a wrong sample (outcome blames every token of it). Online RFT differs from
GRPO only in mixed groups (it reinforces the right samples and ignores the wrong ones). So the shares below bound
what process supervision and GRPO's negative gradient can add over outcome GRPO and online RFT on a given policy.

Pure functions over sampled groups; :func:`anatomy_of_samples` reads a harness samples file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from grpo_ext.report_format import fmt, md_header, md_row

__all__ = ["ANATOMY_FIELDS", "anatomy_of_samples", "group_anatomy"]

ANATOMY_FIELDS = {
    "all_correct": "groups with every sample right (no outcome signal)",
    "all_wrong": "groups with every sample wrong (no outcome signal)",
    "mixed": "groups with outcome signal (where online RFT and GRPO differ)",
    "all_wrong_with_step_signal": "all-wrong groups whose step scores differ (signal only process supervision has)",
    "wrong_with_correct_prefix": "wrong samples whose first step is right (a prefix outcome supervision blames)",
    "correct_prefix_share": "share of a wrong sample's steps before its first wrong one (mean over wrong samples)",
}


def group_anatomy(groups: Sequence[tuple[Sequence[bool], Sequence[Sequence[float]]]]) -> dict:
    """Shares of :data:`ANATOMY_FIELDS` over ``groups``: each is ``(correct flags, step scores per sample)``, the
    step scores as the task's step verifier gives them (1.0 right, 0.0 wrong, NaN: nothing to check, left out)."""
    counts = dict.fromkeys(ANATOMY_FIELDS, 0.0)
    wrong_samples = 0
    for correct, steps in groups:
        if all(correct):
            counts["all_correct"] += 1
        elif not any(correct):
            counts["all_wrong"] += 1
            scores = {s for sample in _checked(steps) for s in sample}
            counts["all_wrong_with_step_signal"] += len(scores) > 1
        else:
            counts["mixed"] += 1
        for ok, sample in zip(correct, _checked(steps), strict=True):
            if ok:
                continue
            wrong_samples += 1
            first_wrong = next((i for i, s in enumerate(sample) if s < 1.0), len(sample))
            counts["wrong_with_correct_prefix"] += first_wrong > 0
            counts["correct_prefix_share"] += first_wrong / len(sample) if sample else 0.0
    n_groups = max(len(groups), 1)
    shares = {k: counts[k] / n_groups for k in ("all_correct", "all_wrong", "mixed", "all_wrong_with_step_signal")}
    for key in ("wrong_with_correct_prefix", "correct_prefix_share"):
        shares[key] = counts[key] / wrong_samples if wrong_samples else 0.0
    return {**shares, "groups": len(groups), "wrong_samples": wrong_samples}


def _checked(steps: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each sample's scores of the steps the verifier checked: a step with nothing to check (NaN) is neither right
    nor wrong, so it neither makes nor ends a correct prefix."""
    return [[s for s in sample if not math.isnan(s)] for sample in steps]


def prompt_key(prompt) -> str:
    """A prompt as a dict key: its text, or, for a chat prompt (a list of messages), its JSON."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def anatomy_of_samples(
    path: Path,
    answers: dict[str, str],
    is_correct: Callable[[str, str], bool],
    verify_steps: Callable[[str, str], list[float]],
    group_size: int,
) -> dict:
    """:func:`group_anatomy` of a harness samples file (``*_samples.jsonl``): each problem's first ``group_size``
    samples form its group, as a GRPO step would draw them. ``answers`` maps the prompt (:func:`prompt_key`) to its
    reference answer; a chat prompt's steps are verified against its last message (the question)."""
    from grpo_ext.tasks.base import completion_text

    by_problem: dict[str, dict[int, dict]] = {}
    with open(path) as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                by_problem.setdefault(row["problem_id"], {})[int(row["sample_index"])] = row
    groups = []
    for rows in by_problem.values():
        chosen = [rows[i] for i in sorted(rows)[:group_size]]
        if len(chosen) < group_size:
            raise ValueError(f"{path}: a problem has {len(chosen)} samples, fewer than the group size {group_size}")
        prompt = chosen[0]["prompt"]
        completions = [r["completion"] for r in chosen]
        correct = [is_correct(c, answers[prompt_key(prompt)]) for c in completions]
        groups.append((correct, [verify_steps(completion_text(prompt), c) for c in completions]))
    return group_anatomy(groups)


def study_anatomy(study, out: Path, picks: dict, configs: str) -> dict:
    """The anatomy of the base's and every pick's test samples (first seed; each problem's first ``num_generations``
    samples of the first online arm's config as its group), and, for the online picks, the mean share of training
    groups without outcome signal (TRL's ``frac_reward_zero_std``, logged at the training temperature)."""
    from grpo_ext.experiments.study.method_configs import arm_values, method_config_path, task_of
    from grpo_ext.methods.cost import LOG_FILE
    from grpo_ext.methods.paradigm import get_method
    from grpo_ext.tasks import get_task

    config = method_config_path(study.arms[0].method, configs)  # the task: every arm trains on the same stage
    split = study.test.split
    # the training group size (an online arm's: an offline config has none, the first arm of a study may be SFT), or
    # fewer where a test evaluation drew fewer samples a problem (the quick run; a study scoring the arms at a smaller
    # n than the base): every model's groups have the same size
    folders = [Path(out) / "base", *(study.run_dir(out, arm, picks[arm.name], study.seeds[0]) for arm in study.arms)]
    drawn = min(int(json.loads((folder / f"{split}.json").read_text())["n"]) for folder in folders)
    online = next((arm for arm in study.arms if get_method(arm.method).online), None)
    group_size = min(arm_values(online, configs)["num_generations"] if online is not None else 8, drawn)
    task_name, task_kwargs = task_of(config)
    task = get_task(task_name, **task_kwargs)
    problems = task.load(study.test.split, study.test.limit)
    answers = {prompt_key(p): a for p, a in zip(problems["prompt"], problems["answer"], strict=True)}

    def of(folder: Path) -> dict:
        return anatomy_of_samples(
            folder / f"{split}_samples.jsonl", answers, task.is_correct, task.verify_steps, group_size
        )

    rows = {"base": of(Path(out) / "base")}
    for arm in study.arms:
        folder = study.run_dir(out, arm, picks[arm.name], study.seeds[0])
        rows[arm.name] = of(folder)
        log = folder / LOG_FILE
        shares = [e["frac_reward_zero_std"] for e in json.loads(log.read_text()) if "frac_reward_zero_std" in e]
        rows[arm.name]["training_zero_std"] = sum(shares) / len(shares) if shares else None
    return {"group_size": group_size, "seed": study.seeds[0], "split": split, "rows": rows}


def render_anatomy(anatomy: dict, reference_label: str = "base") -> list[str]:
    """The report's section: one row per model, the columns of :data:`ANATOMY_FIELDS`; the run the records call
    ``base`` is shown as ``reference_label``."""
    keys = list(ANATOMY_FIELDS)
    lines = [
        "## Where the learning signal is (diagnostic)",
        "",
        f"Each problem's first {anatomy['group_size']} `{anatomy['split']}` samples (seed {anatomy['seed']}) as one "
        "group, as a GRPO step draws it; step scores from the task's step verifier. A diagnostic of the models, "
        "not a selection: nothing is picked from it. "
        + "; ".join(f"*{k}*: {v}" for k, v in ANATOMY_FIELDS.items())
        + "; *training zero-std*: the share of training groups without outcome signal, mean over the run's log.",
        "",
        *(
            [
                "Carried over from the previous `report.json` of this study, computed from the same test results "
                "(every pass@1 equal): the test sample caches it reads are not committed.",
                "",
            ]
            if anatomy.get("carried_over")
            else []
        ),
        *md_header(["model", *keys, "training zero-std"], "l" + "r" * (len(keys) + 1)),
    ]
    for name, row in anatomy["rows"].items():
        zero_std = row.get("training_zero_std")
        cells = [fmt(row[k]) for k in keys] + ["-" if zero_std is None else fmt(zero_std)]
        lines.append(md_row([reference_label if name == "base" else name, *cells]))
    return [*lines, ""]
