"""What each run trained on and was scored on, counted from its records: the numbers the report's prose and tables
state (optimizer steps, samples generated, gradient samples, unique sequences and epochs, problems, n), never typed.

A run's ``training_cost.json`` (:mod:`grpo_ext.methods.cost`) holds its counts. Records written before it carried
``unique_sequences`` counted an offline run's gradient samples as steps x the full batch, which overcounts a small
dataset (an epoch's last step takes what is left): their counts are rebuilt here from the dataset size in the
record's ``details`` and the batch settings of the run's config (``method_run.json``), with the trainer's own epoch
arithmetic (:func:`grpo_ext.methods.cost.offline_trained_examples`), and marked ``reconstructed``.

Pure functions over records (:func:`run_counts`, :func:`spread`, :func:`sizes_text`, :func:`render_counts`); the
report reads the files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from grpo_ext.methods.cost import offline_trained_examples
from grpo_ext.report_format import md_header, md_row

__all__ = [
    "DATASET_KEYS",
    "log_counts",
    "render_counts",
    "run_counts",
    "same_for_every_arm",
    "sizes_text",
    "spread",
]

#: The ``details`` key of a cost record that holds an offline run's dataset size, in examples
#: (:mod:`grpo_ext.methods.trainers`: SFT's reference solutions, RFT's unique right samples, DPO's pairs), and what
#: the report calls them.
DATASET_KEYS = {"examples": "reference solutions", "unique_correct": "unique right samples", "pairs": "pairs"}


def _dataset(details: Mapping) -> tuple[str, int] | None:
    return next(((k, int(details[k])) for k in DATASET_KEYS if k in details), None)


def run_counts(cost: Mapping, training: Mapping | None, online: bool, sequences_per_example: int = 1) -> dict:
    """A run's counts: ``optimizer_steps``, ``samples_generated``, ``trained_sequences`` (gradient samples, repeats
    counted), ``unique_sequences``, ``epochs`` (trained / unique; None without unique ones), ``reconstructed`` (the
    record predates ``unique_sequences``: rebuilt, see the module docstring) and ``data`` (what an offline run
    trained on: its dataset key and size, and the draw behind it, from the record's ``details``).

    ``cost``: the run's ``training_cost.json``; ``training``: its training config (``method_run.json``'s
    ``training``: batch size, accumulation, ``num_iterations``); ``online``: whether the method generates while it
    trains; ``sequences_per_example``: 2 for a DPO pair."""
    training = training or {}
    details = cost.get("details") or {}
    steps = int(cost.get("optimizer_steps", 0))
    trained = int(cost.get("trained_sequences", 0))
    unique = cost.get("unique_sequences")
    reconstructed = False
    dataset = _dataset(details) if not online else None
    if unique is None:
        if online:  # each step trains on its fresh generation batch, `num_iterations` times
            unique = trained // max(int(training.get("num_iterations") or 1), 1)
        elif dataset is not None and "per_device_train_batch_size" in training:
            examples = dataset[1]
            accumulation = int(training.get("gradient_accumulation_steps") or 1)
            micro_batch = int(training["per_device_train_batch_size"])  # the studies ran on one process
            trained_examples = offline_trained_examples(examples, micro_batch, accumulation, steps)
            trained = trained_examples * sequences_per_example
            unique = min(examples, trained_examples) * sequences_per_example
            reconstructed = True
    unique = int(unique) if unique is not None else None
    return {
        "optimizer_steps": steps,
        "samples_generated": int(cost.get("samples_generated", 0)),
        "trained_sequences": trained,
        "unique_sequences": unique,
        "epochs": trained / unique if unique else None,
        "reconstructed": reconstructed,
        "data": {**details, "dataset": dataset[0] if dataset else None},
    }


def log_counts(history: Sequence | None) -> dict:
    """What a run's training log (``training_log.json``, TRL's log history) says of its passes and rate:
    ``prompt_passes``, the last logged ``epoch`` (an online run's passes over its prompts: 1 or less, no prompt seen
    twice), and ``min_learning_rate``, the lowest logged ``learning_rate`` (above 0: no step at rate 0); None where
    the log has none."""
    entries = [e for e in history or [] if isinstance(e, dict)]
    epochs = [float(e["epoch"]) for e in entries if isinstance(e.get("epoch"), (int, float))]
    rates = [float(e["learning_rate"]) for e in entries if isinstance(e.get("learning_rate"), (int, float))]
    return {"prompt_passes": epochs[-1] if epochs else None, "min_learning_rate": min(rates) if rates else None}


def spread(values: Sequence, form=None) -> str:
    """Values of an arm's seeds: ``384`` when they agree, ``96-276`` (the range) when they differ, ``-`` for none;
    floats to one decimal, or each as ``form`` (a function) writes it."""
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    form = form or (lambda v: f"{v:.1f}".removesuffix(".0") if isinstance(v, float) else str(v))
    text = [form(v) for v in (min(known), max(known))]
    return text[0] if text[0] == text[1] else f"{text[0]}-{text[1]}"


def _trained_on(runs: Sequence[Mapping], online: bool, num_generations: int | None) -> str:
    """What an arm's runs trained on, in words, with the counts of their records (ranges over seeds)."""
    if online:
        groups = [r["samples_generated"] // num_generations for r in runs] if num_generations else []
        prompts = f" ({spread(groups)} groups of {num_generations})" if groups else ""
        return f"its own samples, generated while training{prompts}"
    data = [r["data"] for r in runs]
    key = data[0].get("dataset")
    if key is None:
        return "-"
    text = f"{spread([d.get(key) for d in data])} {DATASET_KEYS[key]}"
    if key == "unique_correct":
        text += (
            f" (right: {spread([d.get('correct_samples') for d in data])} of "
            f"{spread([r['samples_generated'] for r in runs])} drawn from the start model, on "
            f"{spread([d.get('prompts_with_a_correct_sample') for d in data])} of "
            f"{spread([d.get('prompts') for d in data])} prompts)"
        )
    elif key == "pairs":
        text += (
            f" (right, wrong) from {spread([d.get('prompts_with_pairs') for d in data])} of "
            f"{spread([d.get('prompts') for d in data])} prompts ({spread([r['samples_generated'] for r in runs])} "
            "drawn from the start model)"
        )
    return text


def same_for_every_arm(arms: Mapping[str, Sequence[Mapping]], key: str) -> int | None:
    """The value of ``key`` every run of every arm shares, or None when any two differ."""
    values = {r[key] for runs in arms.values() for r in runs}
    return values.pop() if len(values) == 1 else None


def render_counts(arms: Mapping[str, Mapping]) -> list[str]:
    """The report's table of what each arm trained on: ``arms`` maps an arm to ``{"runs": [run_counts per seed, with
    an online run's :func:`log_counts`], "online": bool, "num_generations": int | None}``; a value that differs
    between seeds shows as a range."""
    lines = [
        "What each arm trained on, from its runs' records (`training_cost.json`; a range spans the seeds). "
        "*Gradient samples*: the sequences the gradient was computed on, repeats counted (a DPO pair is two); "
        "*unique*: the distinct ones among them; *epochs*: gradient / unique. For an online run, from its training "
        "log: *prompt passes*, the last logged epoch (at most 1: no prompt drawn twice), and the *lowest learning "
        "rate* logged (above 0: no step at rate 0).",
        "",
        *md_header(
            [
                "arm",
                "optimizer steps",
                "generated samples",
                "gradient samples",
                "unique",
                "epochs",
                "trained on",
                "prompt passes",
                "lowest learning rate",
            ],
            "lrrrrrlrr",
        ),
    ]
    rebuilt = []
    for name, arm in arms.items():
        runs = arm["runs"]
        if any(r["reconstructed"] for r in runs):
            rebuilt.append(name)
        lines.append(
            md_row(
                [
                    name,
                    spread([r["optimizer_steps"] for r in runs]),
                    spread([r["samples_generated"] for r in runs]),
                    spread([r["trained_sequences"] for r in runs]),
                    spread([r["unique_sequences"] for r in runs]),
                    spread([r["epochs"] for r in runs]),
                    _trained_on(runs, arm["online"], arm.get("num_generations")),
                    spread([r.get("prompt_passes") for r in runs], lambda v: f"{v:.2f}".rstrip("0").rstrip(".")),
                    spread([r.get("min_learning_rate") for r in runs], lambda v: f"{v:g}"),
                ]
            )
        )
    lines.append("")
    if rebuilt:
        lines += [
            f"The records of {', '.join(rebuilt)} predate `unique_sequences` and counted every optimizer step as a "
            "full batch: their gradient samples are rebuilt from the dataset size in the record and the run's batch "
            "settings, as the trainer walks its epochs (`grpo_ext.methods.cost.offline_trained_examples`).",
            "",
        ]
    return lines


def sizes_text(sizes: Mapping[str, tuple[int, int]], split: str) -> str:
    """How many problems of ``split`` the models were scored on and at what n, from their results (``sizes``: model ->
    (problems, n)): the most common pair (on a tie the first model's), then the models that differ, e.g.
    ``500 `test` problems (n = 4; base, grpo_outcome: n = 64)``."""
    if not sizes:
        return f"`{split}` problems (no result)"
    common = Counter(sizes.values()).most_common(1)[0][0]
    others: dict[tuple[int, int], list[str]] = {}
    for name, size in sizes.items():
        if size != common:
            others.setdefault(size, []).append(name)
    exceptions = "".join(
        f"; {', '.join(names)}: " + (f"n = {n}" if problems == common[0] else f"{problems} problems, n = {n}")
        for (problems, n), names in others.items()
    )
    return f"{common[0]} `{split}` problems (n = {common[1]}{exceptions})"
