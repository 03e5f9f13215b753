"""Median GRPO step time of GRPOExtTrainer against TRL's GRPOTrainer, side by side, on the embedded model with
configs/default.yaml's GRPO settings (64 samples a step = 8 prompts x 8 generations, 48 completion tokens).

    python -m benchmarks.overhead [--reps 20] [--warmup 3] [--batch 64] [--profile NAME]

Four trainers are built once each from the same model folder and seed:

| name     | trainer        | config                                                                          |
| trl      | GRPOTrainer    | GRPOConfig, beta 0                                                              |
| off      | GRPOExtTrainer | GRPOExtConfig with every extension off, beta 0                                  |
| trl_kl   | GRPOTrainer    | GRPOConfig, beta 0.04 (reference model and KL term)                             |
| all_on   | GRPOExtTrainer | process advantages from the rule-based step verifier (+ outcome as last step),  |
|          |                | zero_std_groups skip, adaptive beta (init 0.04): configs/process.yaml +         |
|          |                | configs/adaptive_kl.yaml + skip                                                 |

A step is what `Trainer.train` does per optimizer step here: `training_step` (TRL's generation, reward scoring,
advantages, loss, backward) + `optimizer.step` + `lr_scheduler.step` + `zero_grad`. Before every timed step the
policy's weights are restored to the initial ones and torch is seeded with the repetition's seed, so in one
repetition all four trainers generate exactly the same completions from the same prompts (generation dominates a
step, and its cost depends on the sampled lengths). Repetitions rotate the order of the trainers. Ratios are the
median of per-repetition ratios (robust to load drift); `off` vs `trl` losses are checked bit-identical. Wall time
is the measure; this process's CPU time (one thread: what other jobs on the machine do not add to) is reported
next to it, because a 2% effect is below the wall-clock noise of a shared 2-core machine.

Targets: off / trl <= 1.02, all_on / trl_kl <= 1.10 (same initial beta: the KL term's cost is TRL's in both;
all_on / trl is reported for information).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import tempfile
from pathlib import Path

import yaml
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from benchmarks import _common
from grpo_ext.config import GRPOExtConfig
from grpo_ext.tasks import get_task
from grpo_ext.trainer import GRPOExtTrainer

TARGETS = {"off": ("trl", 1.02), "all_on": ("trl_kl", 1.10)}
GRPO_KEYS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_k",
    "loss_type",
    "activation_checkpointing",
    "seed",
)
ALL_ON = {  # configs/process.yaml + configs/adaptive_kl.yaml + zero_std_groups: skip
    "advantage_mode": "process",
    "process_include_outcome": True,
    "zero_std_groups": "skip",
    "kl_controller": "adaptive",
    "beta": 0.04,
    "target_kl": 0.01,
    "kl_horizon": 2000,
    "beta_min": 1e-4,
    "beta_max": 1.0,
}


def base_settings(batch: int | None) -> tuple[dict, dict]:
    """GRPO settings and task kwargs from configs/default.yaml (the embedded default)."""
    config = yaml.safe_load((_common.ROOT / "configs" / "default.yaml").read_text())
    settings = {k: config[k] for k in GRPO_KEYS if k in config}
    if batch is not None:
        settings["per_device_train_batch_size"] = batch
    settings.update(
        use_cpu=True,
        bf16=False,
        max_steps=10_000,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        beta=0.0,
    )
    return settings, config.get("task_kwargs", {})


def build_trainers(model: str, batch: int | None, out_dir: Path, names: list[str]):
    settings, task_kwargs = base_settings(batch)
    task = get_task("arithmetic", **task_kwargs)
    dataset = task.load("train", 2048)
    specs = {
        "trl": (GRPOTrainer, GRPOConfig, {}, {}),
        "off": (GRPOExtTrainer, GRPOExtConfig, {"step_separator": task.step_separator}, {}),
        "trl_kl": (GRPOTrainer, GRPOConfig, {"beta": 0.04}, {}),
        "all_on": (
            GRPOExtTrainer,
            GRPOExtConfig,
            {**ALL_ON, "step_separator": task.step_separator},
            {"process_reward_funcs": [task.step_reward]},
        ),
    }
    trainers = {}
    for name in names:
        trainer_cls, config_cls, extra, kwargs = specs[name]
        set_seed(settings["seed"])
        args = config_cls(output_dir=str(out_dir / name), **{**settings, **extra})
        trainer = trainer_cls(
            model=model, reward_funcs=[task.outcome_reward], args=args, train_dataset=dataset, **kwargs
        )
        trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by train() otherwise
        trainer.create_optimizer_and_scheduler(num_training_steps=args.max_steps)
        trainer.model.train()
        trainers[name] = trainer
    return trainers, dataset, settings


def make_batches(dataset, settings: dict, count: int) -> list[list[dict]]:
    """Generation batches laid out as TRL's RepeatSampler yields them: each prompt num_generations times in a row."""
    group = settings["num_generations"]
    prompts = settings["per_device_train_batch_size"] // group
    rows = dataset.select(range(count * prompts)).to_list()
    return [[row for row in rows[b * prompts : (b + 1) * prompts] for _ in range(group)] for b in range(count)]


def one_step(trainer, batch) -> float:
    loss = trainer.training_step(trainer.model, batch, None)
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.model.zero_grad(set_to_none=True)
    return float(loss)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=None, help="samples a step (default: configs/default.yaml's)")
    parser.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    parser.add_argument(
        "--profile",
        default=None,
        choices=["trl", "off", "trl_kl", "all_on"],
        help="instead of the benchmark: cProfile --reps steps of one trainer and print the top",
    )
    args = parser.parse_args(argv)
    _common.set_threads(1)
    model = args.model or _common.model_dir()
    load_start = _common.load_average()

    with tempfile.TemporaryDirectory(prefix="grpo_ext_bench_") as tmp:
        names = [args.profile] if args.profile else ["trl", "off", "trl_kl", "all_on"]
        trainers, dataset, settings = build_trainers(model, args.batch, Path(tmp), names)
        group = settings["num_generations"]
        batches = make_batches(dataset, settings, args.warmup + args.reps)
        snapshots = {n: copy.deepcopy(t.model.state_dict()) for n, t in trainers.items()}
        losses: dict[str, dict[int, float]] = {n: {} for n in trainers}
        lengths: dict[str, dict[int, float]] = {n: {} for n in trainers}

        def before(name: str, r: int) -> None:
            trainers[name].model.load_state_dict(snapshots[name])
            set_seed(1000 + r + args.warmup)

        def runner(name: str):
            trainer = trainers[name]

            def fn(r: int) -> None:
                losses[name][r] = one_step(trainer, batches[r + args.warmup])
                lengths[name][r] = trainer._metrics["train"]["completions/mean_length"][-1]

            return fn

        if args.profile:
            return profile(trainers[args.profile], batches, args.reps, before, args.profile)
        cpu: dict[str, list[float]] = {}
        times = _common.alternate(
            {n: runner(n) for n in trainers}, reps=args.reps, warmup=args.warmup, before=before, cpu_times=cpu
        )

    load = _common.load_average()
    reps = range(args.reps)
    identical = all(losses["off"][r] == losses["trl"][r] for r in reps)
    same_lengths = all(lengths[n][r] == lengths["trl"][r] for n in trainers for r in reps)
    summaries = {n: _common.summary(t) for n, t in times.items()}
    pairs = {"off": ("off", "trl"), "all_on": ("all_on", "trl_kl"), "all_on_vs_trl_beta0": ("all_on", "trl")}
    ratios = {key: _common.paired_ratio(times[a], times[b]) for key, (a, b) in pairs.items()}
    cpu_ratios = {key: _common.paired_ratio(cpu[a], cpu[b]) for key, (a, b) in pairs.items()}
    verdicts = {n: ratios[n]["median_of_ratios"] <= TARGETS[n][1] for n in TARGETS}
    cpu_verdicts = {n: cpu_ratios[n]["median_of_ratios"] <= TARGETS[n][1] for n in TARGETS}
    load_cell = " / ".join(map(str, load))

    def ms(name):
        s = summaries[name]
        return f"{s['median'] * 1e3:.0f} ms ({s['q1'] * 1e3:.0f}-{s['q3'] * 1e3:.0f})"

    def ratio_cell(key):
        r, c = ratios[key], cpu_ratios[key]
        return (
            f"{r['median_of_ratios']:.3f}x (IQR {r['q1']:.3f}-{r['q3']:.3f}); CPU time "
            f"{c['median_of_ratios']:.3f}x (IQR {c['q1']:.3f}-{c['q3']:.3f})"
        )

    def verdict_cell(key):
        return f"{_common.verdict(verdicts[key])} (CPU time: {_common.verdict(cpu_verdicts[key])})"

    rows = [
        ["TRL GRPOTrainer, beta 0: step time", ms("trl"), "", "", ""],
        ["GRPOExtTrainer, extensions off, beta 0: step time", ms("off"), "", "", ""],
        [
            "**off / TRL**" + ("" if identical else " (losses differ!)"),
            ratio_cell("off"),
            "<= 1.02x",
            verdict_cell("off"),
            load_cell,
        ],
        ["TRL GRPOTrainer, beta 0.04: step time", ms("trl_kl"), "", "", ""],
        ["GRPOExtTrainer, all on (process + skip + adaptive beta 0.04): step time", ms("all_on"), "", "", ""],
        ["**all on / TRL (beta 0.04)**", ratio_cell("all_on"), "<= 1.10x", verdict_cell("all_on"), load_cell],
        ["all on / TRL (beta 0), for information", ratio_cell("all_on_vs_trl_beta0"), "", "", ""],
    ]
    table = _common.markdown_table(
        [
            f"measure (median of {args.reps} alternated steps, IQR)",
            "value",
            "target",
            "result",
            "load avg (1/5/15 min)",
        ],
        rows,
    )
    table += (
        f"\n\n{settings['per_device_train_batch_size']} samples a step ({group} per prompt), max "
        f"{settings['max_completion_length']} completion tokens, 1 thread; off/TRL losses bit-identical: "
        f"{'yes' if identical else 'NO'}; same completion lengths in all four: {'yes' if same_lengths else 'no'}"
    )
    payload = {
        "params": vars(args) | {"model": model, "settings": settings},
        "load_average_start": load_start,
        "step_seconds": summaries,
        "step_cpu_seconds": {n: _common.summary(t) for n, t in cpu.items()},
        "ratios": ratios,
        "cpu_time_ratios": cpu_ratios,
        "losses_off_equal_trl": identical,
        "same_completion_lengths": same_lengths,
        "mean_completion_length": {n: _common.median(list(v.values())) for n, v in lengths.items()},
        "targets": {n: f"{n} / {b} <= {t}" for n, (b, t) in TARGETS.items()},
        "pass": verdicts,
        "pass_cpu_time": cpu_verdicts,
    }
    _common.write_results("overhead", payload, table)
    return payload


def profile(trainer, batches, reps: int, before, name: str) -> dict:
    """cProfile `reps` steps of one trainer (after one untimed step) and print the 40 most expensive calls."""
    before(name, -1)
    one_step(trainer, batches[0])
    profiler = cProfile.Profile()
    for r in range(reps):
        before(name, r)
        profiler.enable()
        one_step(trainer, batches[(r + 1) % len(batches)])
        profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream).sort_stats("cumulative")
    stats.print_stats(40)
    print(stream.getvalue())
    return {}


def summary_rows() -> list[list]:
    """This benchmark's rows of the `run_all` summary (:func:`benchmarks._common.dated_rows`)."""

    def rows(r):
        for key, label, target in (
            ("off", "GRPOExtTrainer, extensions off / TRL GRPOTrainer", "<= 1.02x"),
            ("all_on", "GRPOExtTrainer, all on / TRL GRPOTrainer (same beta)", "<= 1.10x"),
        ):
            ratio = r["ratios"][key]
            cpu = r.get("cpu_time_ratios", {}).get(key)
            value = f"{ratio['median_of_ratios']:.3f}x" + (f" (CPU time {cpu['median_of_ratios']:.3f}x)" if cpu else "")
            result = _common.verdict(r["pass"][key])
            if "pass_cpu_time" in r:
                result += f" (CPU time: {_common.verdict(r['pass_cpu_time'][key])})"
            yield f"{label}: median step time", value, target, result

    return _common.dated_rows(_common.load_result("overhead"), rows)


if __name__ == "__main__":
    main()
