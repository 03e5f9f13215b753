"""The real-model GRPO step, phase by phase, for TRL's two transformers generation paths and grpo-ext's sampler, each
in float32 and bfloat16 (issue 37).

    python -m benchmarks.real_step [--config configs/real/cpu.yaml] [--reps 2] [--warmup 1]
                                   [--variants generate:float32,sampler:bfloat16[:eager][:shared_prompt],...]
                                   [--device auto|cpu|cuda]
                                   [--name real_step] [-- <TRL/grpo-ext flags overriding the config>]

The recipe is ``--config`` (default ``configs/real/cpu.yaml``: SmolLM2-135M-Instruct, LoRA r16, 32 completions x 64
tokens a step, 4 prompts x 8, loss in 4 micro-batches), parsed exactly as ``scripts/train.py`` parses it; anything
after ``--`` overrides it the same way (e.g. ``-- --max_completion_length 16``). Each variant is one trainer built
from that recipe with only these changed:

| variant      | generation                                                                  |
| generate     | TRL's default (transformers ``generate``)                                    |
| continuous   | TRL's ``use_transformers_continuous_batching: true`` (paged attention)       |
| sampler      | grpo-ext's ``generation_backend: sampler`` (continuous-batching sampler)     |

and the model's ``dtype`` (``float32``: the recipe's precision before issue 37; ``bfloat16``: the base weights in bf16,
LoRA weights and AdamW state in float32 as PEFT keeps them, what ``cpu_bf16: auto`` picks on a CPU with native bf16).
On CUDA, ``bf16`` (autocast) is on with ``bfloat16``. Every variant scores the loss's log-probs as the shipped code
does (on a CPU only the completion positions: ``grpo_ext.policy_loading.compact_log_probs_on_cpu``) unless its name ends
in ``:all_positions`` (TRL's own CPU path, every position through the LM head): ``generate:float32:all_positions``,
the recipe before issue 37, is the default's first variant and the baseline of the speed-ups. A part ``:eager`` builds
the policy with ``attn_implementation: eager`` instead of transformers' default ``sdpa`` (``sampler:bfloat16:eager``;
the sampler's CPU decode steps attend with ``grpo_ext/sampler/decode_attention.py`` either way). A part
``:shared_prompt`` turns on ``share_prompt_forward`` (``grpo_ext/shared_prompt.py``: the loss's forward and backward
compute each group's prompt once, and micro-batches hold whole groups); every other variant runs with it off, whatever
the recipe says (``sampler:bfloat16:shared_prompt`` against ``sampler:bfloat16``: 45 against 64 CPU s a step, the
baseline 142, on 2026-11-27; ``sampler:bfloat16:shared_prompt`` is the shipped recipe).
A part ``:cpu_flash`` keeps SDPA's flash kernel in the loss's attention on a CPU (the code before issue 49; see
``CPU_FLASH``). TRL's continuous batching
gets a bounded KV cache on a CPU (``CPU_CONTINUOUS_BATCHING``; by default it takes most of the free RAM).

A step is what ``Trainer.train`` does per optimizer step: ``gradient_accumulation_steps`` calls of ``training_step``
(the first generates and scores the whole generation batch; each computes the loss of its micro-batch and
back-propagates it), then the optimizer and scheduler steps and ``zero_grad``. Phases are timed by wrapping TRL's own
methods on each trainer (TRL is not edited): ``generation`` = ``_generate`` (tokenising, sampling, decoding),
``scoring`` = the rest of ``_generate_and_score_completions`` (rewards, advantages), ``loss forward`` =
``compute_loss`` (summed over the micro-batches), ``loss backward`` = ``training_step`` minus those, ``optimizer`` =
the rest of the step. On CUDA every timer synchronises first. Each phase has its wall-clock seconds and this process's
CPU seconds (``<phase>_cpu``): on one thread the CPU time is what the step costs, whatever other jobs on a shared
machine do meanwhile, so the table leads with it (on CUDA the wall time is the measure).

Every trainer is built first (the same seed) and warmed up with ``--warmup`` steps (timed apart); then ``--reps``
repetitions run one step of every variant, in an order rotated by the repetition (``benchmarks._common.alternate``),
all variants on the same prompts (repetition ``r``'s generation batch) with torch seeded alike. Medians over the
repetitions; the speed-up of each variant is the median of its per-repetition ratios to the first variant's step
(``generate:float32:all_positions``, the recipe before issue 37, by default). The mean completion length and mean
reward of each variant's timed steps stand beside its times: a faster step must not come from shorter answers. One
thread (``benchmarks/__init__.py``); the device (CPU model and its bf16 support, or the GPU) is recorded in the JSON
(``benchmarks/results/<--name>.json``, or ``--out``).

Costs on 2 shared cores (one thread): a float32 step of the default recipe is 1-3 minutes, a bfloat16 one about half;
the default (8 variants, 1 warm-up + 2 repetitions) is ~50-65 minutes of one core (wall time grows with what else
runs on the machine; the JSON is rewritten after every repetition). A quick rehearsal of the code paths:
``--reps 1 --warmup 0 -- --max_completion_length 8``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import _common
from benchmarks._step_clock import PhaseClock, device_facts, resolve_device, summarise, table
from benchmarks._step_clock import synchronize as _synchronize

NAME = "real_step"
DEFAULT_CONFIG = "configs/real/cpu.yaml"
BACKENDS = ("generate", "continuous", "sampler")
DTYPES = ("float32", "bfloat16")
#: A third part ``:all_positions`` times TRL's own CPU scoring (its fused LM head over every position, prompts
#: included) instead of grpo-ext's compact one (``grpo_ext.policy_loading.compact_log_probs_on_cpu``).
ALL_POSITIONS = "all_positions"
#: A part ``:eager`` builds the policy with ``attn_implementation: eager`` (transformers' default is ``sdpa``).
EAGER = "eager"
#: A part ``:shared_prompt`` sets ``share_prompt_forward`` (each group's prompt forwarded once in the loss).
SHARED_PROMPT = "shared_prompt"
#: A part ``:cpu_flash`` keeps SDPA's own pick (its fused flash kernel on a CPU) in the loss's forward, the code before
#: issue 49, as does a variant ``:all_positions`` (TRL's own loss path); every other variant's loss attends through
#: SDPA's math backend on a CPU (``grpo_ext.shared_prompt.CPU_MATH_ATTENTION``).
CPU_FLASH = "cpu_flash"
PARTS = (ALL_POSITIONS, EAGER, SHARED_PROMPT, CPU_FLASH)
#: The recipe before issue 37 first (the baseline of the speed-ups), then the shipped code's six variants, then the
#: shipped recipe (configs/real/cpu.yaml: the sampler, a bf16 base, share_prompt_forward).
DEFAULT_VARIANTS = (
    f"generate:float32:{ALL_POSITIONS}",
    *(f"{b}:{d}" for d in DTYPES for b in BACKENDS),
    f"sampler:bfloat16:{SHARED_PROMPT}",
)
#: TRL's continuous batching sizes its KV cache from 60-90% of the free memory, which on a CPU is the machine's RAM
#: (a run here was killed by the kernel at 14 GB): on a CPU its cache gets this many 256-token pages, ample for a
#: step of 32 x (~160 + 64) tokens.
CPU_CONTINUOUS_BATCHING = {"num_blocks": 64}
#: What each backend changes in the recipe (GRPOExtConfig fields).
BACKEND_FIELDS = {
    "generate": {"generation_backend": "trl", "use_transformers_continuous_batching": False},
    "continuous": {"generation_backend": "trl", "use_transformers_continuous_batching": True},
    "sampler": {"generation_backend": "sampler", "use_transformers_continuous_batching": False},
}


def parse_variants(text: str) -> list[tuple[str, str, bool, str | None, bool, bool]]:
    """``backend:dtype[:all_positions][:eager][:shared_prompt][:cpu_flash]`` items -> ``(backend, dtype, compact
    scoring, attention, shared prompt forward, the loss's SDPA flash kernel on a CPU)`` (attention: None, the model's
    default (``sdpa``), or ``eager``)."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        backend, dtype, *rest = item.split(":") + [""]
        rest = [r for r in rest if r]
        if (
            backend not in BACKENDS
            or dtype not in DTYPES
            or any(r not in PARTS for r in rest)
            or len(set(rest)) != len(rest)
        ):
            raise SystemExit(
                f"--variants: {item!r} is not <backend>:<dtype>[:{ALL_POSITIONS}][:{EAGER}][:{SHARED_PROMPT}]"
                f"[:{CPU_FLASH}] with "
                "backend in "
                f"{', '.join(BACKENDS)} and dtype in {', '.join(DTYPES)}"
            )
        out.append(
            (
                backend,
                dtype,
                ALL_POSITIONS not in rest,
                EAGER if EAGER in rest else None,
                SHARED_PROMPT in rest,
                CPU_FLASH in rest,
            )
        )
    if not out:
        raise SystemExit("--variants: name at least one <backend>:<dtype>")
    return out


def variant_name(
    backend: str, dtype: str, compact: bool, attention: str | None = None, shared: bool = False, flash: bool = False
) -> str:
    parts = ("" if compact else f":{ALL_POSITIONS}") + (f":{attention}" if attention else "")
    return f"{backend}:{dtype}{parts}" + (f":{SHARED_PROMPT}" if shared else "") + (f":{CPU_FLASH}" if flash else "")


def parse_recipe(config: str, overrides: list[str], out_dir: str):
    """``(task_args, training_args, model_args)`` as ``scripts/train.py`` parses ``--config`` + flags."""
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.script_args import TrainArguments

    argv = ["--config", config, *overrides, "--output_dir", out_dir]
    return parse_trl_config((TrainArguments, GRPOExtConfig, ModelConfig), argv)


def build_trainer(
    config: str,
    overrides: list[str],
    backend: str,
    dtype: str,
    device: str,
    out_dir: str,
    attention: str | None = None,
    shared: bool = False,
):
    """One variant's trainer, built the way ``scripts/train.py`` builds it (``build_grpo_trainer``); ``attention``:
    the policy's ``attn_implementation`` (None: the recipe's); ``shared``: ``share_prompt_forward``."""
    from transformers import set_seed

    from grpo_ext.assembly import build_grpo_trainer
    from grpo_ext.tasks import get_task

    cuda = device == "cuda"
    extra = [f"--{k}={v}" for k, v in BACKEND_FIELDS[backend].items()]
    # the variant names the dtype: cpu_bf16 (which would choose one on a CPU) is off
    extra += [f"--dtype={dtype}", "--cpu_bf16=off", f"--use_cpu={not cuda}", f"--bf16={cuda and dtype == 'bfloat16'}"]
    extra += ["--report_to=none", "--save_strategy=no", "--disable_tqdm=true", "--max_steps=10000"]
    extra.append(f"--share_prompt_forward={shared}")  # the variant's name decides, not the recipe
    if attention is not None:
        extra.append(f"--attn_implementation={attention}")
    task_args, args, model_args = parse_recipe(config, [*overrides, *extra], out_dir)
    if backend == "continuous" and not cuda and not args.transformers_continuous_batching_config:
        args.transformers_continuous_batching_config = dict(CPU_CONTINUOUS_BATCHING)
    set_seed(args.seed)
    task = get_task(task_args.task, **task_args.task_kwargs)
    trainer = build_grpo_trainer(
        task, args, model_args=model_args, reward_funcs=task_args.reward_funcs, train_size=task_args.train_size
    )
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by train() otherwise
    trainer.create_optimizer_and_scheduler(num_training_steps=args.max_steps)
    trainer.model.train()
    clock = PhaseClock(device)
    clock.wrap(trainer, "_generate", "generation")
    clock.wrap(trainer, "_generate_and_score_completions", "generate_and_score")
    clock.wrap(trainer, "compute_loss", "loss_forward")
    clock.wrap(trainer, "training_step", "training_step")
    return trainer, clock


def generation_batches(trainer, count: int) -> list[list[dict]]:
    """``count`` generation batches laid out as TRL's RepeatSampler yields them (each prompt ``num_generations``
    times in a row), from the trainer's own train dataset in order."""
    args = trainer.args
    group = args.num_generations
    prompts = args.generation_batch_size // group
    rows = trainer.train_dataset.select(range(count * prompts)).to_list()
    return [[row for row in rows[b * prompts : (b + 1) * prompts] for _ in range(group)] for b in range(count)]


def one_step(trainer, clock: PhaseClock, batch: list[dict], compact: bool = True, math_attention: bool = True) -> dict:
    """One optimizer step (all micro-batches) on ``batch``; its phase times, mean completion length and reward.
    ``compact``: grpo-ext's compact CPU scoring (False: TRL's own, every position); ``math_attention``: the loss's
    attention through SDPA's math backend on a CPU (False: SDPA's pick, its flash kernel)."""
    from grpo_ext import policy_loading, shared_prompt

    policy_loading.CPU_COMPACT_LOG_PROBS = compact
    shared_prompt.CPU_MATH_ATTENTION = math_attention
    device = clock.device
    _synchronize(device)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(trainer.args.gradient_accumulation_steps):
        trainer.training_step(trainer.model, batch, None)  # generates at the first micro-batch (TRL's _prepare_inputs)
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.model.zero_grad(set_to_none=True)
    _synchronize(device)
    t = clock.take()
    t["step"], t["step_cpu"] = time.perf_counter() - start, time.process_time() - cpu
    metrics = trainer._metrics["train"]
    out = {}
    for suffix in ("", "_cpu"):  # wall-clock seconds, and this process's CPU seconds (one thread: what other jobs
        # on a shared machine do not add to)
        got = {k: t.get(k + suffix, 0.0) for k in ("generation", "generate_and_score", "loss_forward", "training_step")}
        out |= {
            "generation" + suffix: got["generation"],
            "scoring" + suffix: got["generate_and_score"] - got["generation"],
            "loss_forward" + suffix: got["loss_forward"],
            "loss_backward" + suffix: got["training_step"] - got["generate_and_score"] - got["loss_forward"],
            "optimizer" + suffix: t["step" + suffix] - got["training_step"],
            "step" + suffix: t["step" + suffix],
        }
    return {
        **out,
        "mean_completion_length": metrics["completions/mean_length"][-1],
        "clipped_ratio": metrics["completions/clipped_ratio"][-1],
        "reward": metrics["reward"][-1],
    }


def precision_facts(trainer) -> dict:
    """What the trained model holds: the base weights' dtypes, the trainable (LoRA) ones and AdamW's state."""
    import torch

    model = trainer.model
    frozen = sorted({str(p.dtype) for p in model.parameters() if not p.requires_grad})
    trainable = sorted({str(p.dtype) for p in model.parameters() if p.requires_grad})
    state = sorted(
        {str(v.dtype) for s in trainer.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)}
    )
    return {"frozen_weights": frozen, "trainable_weights": trainable, "optimizer_state": state}


def run(
    config: str,
    overrides: list[str],
    variants: list[tuple[str, str, bool, str | None, bool, bool]],
    device: str,
    reps: int,
    warmup: int,
    on_rep=None,
):
    """Build, warm up and time the variants; ``on_rep(raw, reps_done)`` after each repetition (partial results)."""
    from transformers import set_seed

    names = [variant_name(*v) for v in variants]
    compact = {name: v[2] for name, v in zip(names, variants, strict=True)}
    # TRL's own loss path (:all_positions, the baseline) attends as SDPA picks, as before issue 49
    math_attention = {name: v[2] and not v[5] for name, v in zip(names, variants, strict=True)}
    trainers, warmups, built, errors = {}, {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="grpo_ext_real_step_") as tmp:
        batches = None
        for (backend, dtype, _, attention, shared, _), name in zip(variants, names, strict=True):
            print(f"building {name}", file=sys.stderr, flush=True)
            start = time.perf_counter()
            try:
                trainer, clock = build_trainer(
                    config, overrides, backend, dtype, device, str(Path(tmp) / name), attention, shared
                )
                if batches is None:
                    batches = generation_batches(trainer, warmup + reps)
                built[name] = {"build_seconds": time.perf_counter() - start, "precision": precision_facts(trainer)}
                warmups[name] = []
                for w in range(warmup):
                    set_seed(w)
                    warmups[name].append(one_step(trainer, clock, batches[w], compact[name], math_attention[name]))
                    print(f"  {name} warm-up {w + 1}: {warmups[name][-1]['step']:.3g}s", file=sys.stderr, flush=True)
            except Exception as err:  # one variant failing keeps the others (the table says why)
                errors[name] = f"{type(err).__name__}: {err}"
                print(f"  {name} failed: {errors[name]}", file=sys.stderr, flush=True)
                continue
            trainers[name] = (trainer, clock)

        steps: dict[str, list[dict]] = {n: [] for n in trainers}

        def runner(name: str, r: int):
            trainer, clock = trainers[name]

            def fn(_: int) -> None:
                if name in errors:
                    return
                set_seed(1000 + r)
                try:
                    steps[name].append(
                        one_step(trainer, clock, batches[warmup + r], compact[name], math_attention[name])
                    )
                except Exception as err:
                    errors[name] = f"{type(err).__name__}: {err}"
                    print(f"  {name} failed: {errors[name]}", file=sys.stderr, flush=True)

            return fn

        order = list(trainers)
        for r in range(reps):  # _common.alternate's rotation, one repetition at a time so each can be written out
            shift = r % len(order) if order else 0
            rotated = order[shift:] + order[:shift]
            _common.alternate({n: runner(n, r) for n in rotated}, reps=1, warmup=0, progress=False)
            print(
                f"  rep {r + 1}/{reps}: " + ", ".join(f"{n} {steps[n][-1]['step']:.4g}s" for n in rotated if steps[n]),
                file=sys.stderr,
                flush=True,
            )
            for n in rotated:  # AdamW's state exists once a variant has stepped
                built[n]["precision"] = precision_facts(trainers[n][0])
            if on_rep is not None:
                on_rep({"steps": steps, "warmups": warmups, "built": built, "errors": errors}, r + 1)
    return {"steps": steps, "warmups": warmups, "built": built, "errors": errors}


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, overrides = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the recipe (a scripts/train.py YAML)")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="<backend>:<dtype>, comma-separated")
    parser.add_argument("--reps", type=int, default=2, help="timed steps of each variant (alternated)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps of each variant first")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: CUDA when visible")
    parser.add_argument("--name", default=NAME, help="the result's name: <--out>/<name>.json")
    parser.add_argument(
        "--out", default=str(_common.RESULTS_DIR), help="the result's folder (default benchmarks/results)"
    )
    args = parser.parse_args(argv)
    if args.reps < 1 or args.warmup < 0:
        raise SystemExit("--reps must be >= 1 and --warmup >= 0")
    variants = parse_variants(args.variants)
    names = [variant_name(*v) for v in variants]
    device = resolve_device(args.device)
    config = str(Path(args.config) if Path(args.config).is_absolute() else _common.ROOT / args.config)
    _common.set_threads(1)
    facts = device_facts(device)
    print(f"{NAME}: {', '.join(names)} on {facts.get('name') or device}", file=sys.stderr, flush=True)

    written: list[dict] = []

    def report(raw: dict, reps_done: int) -> None:
        written.append(write(raw, reps_done, args, names, overrides, config, device, facts))

    raw = run(config, overrides, variants, device, args.reps, args.warmup, on_rep=report)
    if not written or written[-1]["reps_done"] < args.reps:  # every variant failed before its timed steps
        report(raw, 0)
    return written[-1]


def write(raw, reps_done, args, names, overrides, config, device, facts) -> dict:
    """The table and JSON of the repetitions done so far (``complete`` once all are)."""
    summary = summarise(raw, names)
    text = table(summary, raw["errors"], names)
    text += (
        f"\n\n{Path(config).name}{' + ' + ' '.join(overrides) if overrides else ''}; device {device} "
        f"({facts.get('name', '')}); medians of {reps_done} alternated steps after {args.warmup} warm-up; "
        "generation = TRL's `_generate`, loss fwd+bwd = the micro-batches' `training_step` less generation and "
        "scoring; CPU s = this process's CPU time (one thread), wall s = elapsed (other jobs on the machine add to it)"
    )
    payload = {
        "device": facts,
        "params": {
            "config": os.path.relpath(config, _common.ROOT) if config.startswith(str(_common.ROOT)) else config,
            "overrides": overrides,
            "variants": names,
            "cpu_continuous_batching_config": CPU_CONTINUOUS_BATCHING if device == "cpu" else None,
            "reps": args.reps,
            "warmup": args.warmup,
        },
        "reps_done": reps_done,
        "complete": reps_done == args.reps,
        **summary,
        "errors": raw["errors"],
    }
    _common.write_results(args.name, payload, text, results_dir=Path(args.out))
    return payload


if __name__ == "__main__":
    main()
