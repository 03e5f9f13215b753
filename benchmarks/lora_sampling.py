"""A trained LoRA adapter against its base: samples per CPU second in the harness and in GRPO's generation, and what
the fast path changes (issue 49, part 1).

    python -m benchmarks.lora_sampling --adapter /tmp/h49/sft_lr3e-4 [--reps 3] [--problems 300] [--n 4]

SmolLM2-135M-Instruct in bf16 (the study's evaluations and `cpu_bf16` training), `word_arithmetic` at the study's
prompt (configs/real/methods/*.yaml), one thread. The adapter is loaded as the study evaluates it (`dtype: bfloat16`:
unmerged, PEFT keeps it float32 beside the bf16 base). Sides:

- **base**: the bf16 base model, no adapter;
- **before**: the adapter as the sampler ran it before issue 49 (PEFT's forward, the prefill's LM head handed the
  strided last position: a frozen head is copied once a prompt by `torch.matmul`);
- **peft**: PEFT's forward, the prefill fixed (`SamplingParams.lora = "peft"`): the exact path;
- **fast**: the default now, the adapter's product in bf16, A and B cast once a call (`lora = "base_dtype"`);
- **merged**: the adapter merged into a bf16 copy of the weights (what TRL does before handing weights to vLLM).

Speed: every side draws the same answer lengths (no EOS, no stop string: every sample runs `--tokens` new tokens),
on the same `--timing-problems` validation prompts, `--n` samples each, `--batch` prompts a batch; in the harness
(`TransformersBackend.generate_stream`, what `evaluate_model` calls) and in GRPO's generation (`rollouts.
sample_completions`, what `generation_backend: sampler` calls, `--group` samples a prompt as `num_generations`).
Sides alternate, `--reps` repetitions after a warm-up, CPU seconds of this process; each ratio is the median of the
per-repetition ratios. Target: fast / base >= 0.8 in both.

Quality: pass@1 of fast against peft paired on `--problems` validation problems (n = `--n`, T = 0.7, the task's stop
string, 64 new tokens, as the study scores), with a 95% bootstrap interval of the difference, and the share of samples
drawn identically. The per-token log-prob gap: the completions' tokens scored teacher-forced by each path against
PEFT's forward (mean and 99th percentile of |difference| over tokens), beside the gap PEFT's own bf16 base makes against
float32 and what the adapter itself changes (adapter against base).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

import torch

from benchmarks import _common
from grpo_ext.evaluation.backends import TransformersBackend, load_model_and_tokenizer
from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_paired_difference_ci
from grpo_ext.evaluation.harness import load_problems
from grpo_ext.rollouts import SamplerSettings, sample_completions
from grpo_ext.sampler import slot_cache
from grpo_ext.sampler.lora_sampling import LoraSampling
from grpo_ext.sampler.sampling import SamplingParams, encode_prompt_ids
from grpo_ext.tasks import get_task

MODEL = "smollm2-135m-instruct"
TARGET = 0.8
TASK_KWARGS = {"min_operands": 2, "max_operands": 2, "digits": 2, "num_fewshot": 2, "balance_operations": True}
SIDES = ("base", "before", "peft", "fast", "merged")


class _NoEos:
    """The tokenizer with no EOS: every sample runs the whole token budget (the same answer lengths on every side)."""

    eos_token_id = None

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)


@contextlib.contextmanager
def _strided_head():
    """The prefill as it was before issue 49: `logits_to_keep=1`, the LM head handed a strided view."""
    fixed = slot_cache.last_position_only
    slot_cache.last_position_only = lambda keep_logits, width, device: keep_logits
    try:
        yield
    finally:
        slot_cache.last_position_only = fixed


def _token_log_probs(model, prompt_ids, completions, fast=False) -> torch.Tensor:
    """Log-probs of each completion's tokens, teacher-forced (a sequence at a time), PEFT's forward or the fast one."""
    out = []
    lora = LoraSampling(model) if fast else None
    with torch.no_grad(), lora.active() if fast else contextlib.nullcontext():
        for ids, completion in zip(prompt_ids, completions, strict=True):
            if not completion:
                continue
            seq = torch.tensor([list(ids) + list(completion)])
            logits = model(input_ids=seq).logits[0, len(ids) - 1 : -1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1))
    return torch.cat(out)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--adapter", required=True, help="a LoRA adapter folder trained on the real model")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--timing-problems", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16, help="prompts a batch (the study evaluates 16)")
    parser.add_argument("--group", type=int, default=8, help="GRPO's num_generations (configs/real/methods)")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens every timed sample draws")
    parser.add_argument("--problems", type=int, default=300, help="validation problems of the paired pass@1")
    parser.add_argument("--n", type=int, default=4, help="samples a problem (timing and pass@1)")
    parser.add_argument("--logprob-samples", type=int, default=64, help="completions scored for the log-prob gap")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--out-name", default="lora_sampling")
    args = parser.parse_args(argv)
    sides = [s for s in args.sides.split(",") if s]
    if "base" not in sides or "fast" not in sides or any(s not in SIDES for s in sides):
        parser.error(f"--sides: from {', '.join(SIDES)}, base and fast included")
    # the adapter is named by its folder's name in what is written (a committed result names no folder of this machine,
    # tests/test_bad_inputs_round5.py)
    shown = Path(args.adapter).name
    sys.argv = [shown if a == args.adapter else a for a in sys.argv]
    _common.set_threads(1)
    logging.getLogger("grpo_ext").setLevel(logging.WARNING)
    load_start = _common.load_average()

    task = get_task("word_arithmetic", **TASK_KWARGS)
    base, tokenizer = load_model_and_tokenizer(MODEL, device="cpu", dtype=torch.bfloat16)
    adapter, _ = load_model_and_tokenizer(args.adapter, device="cpu", dtype=torch.bfloat16, merge_adapter=False)
    models = {"base": base, "before": adapter, "peft": adapter, "fast": adapter}
    # the adapter merged into the bf16 weights (PEFT adds its float32 update to each bf16 weight and rounds)
    merged, _ = load_model_and_tokenizer(args.adapter, device="cpu", dtype=torch.bfloat16, merge_adapter=True)
    models["merged"] = merged
    lora_mode = {"fast": "base_dtype"}  # every other side: PEFT's forward (a plain model has no LoRA layer anyway)

    timing = load_problems(task, "validation", args.timing_problems)
    prompts = [p["prompt"] for p in timing]
    no_eos = _NoEos(tokenizer)
    params = SamplingParams(n=args.n, temperature=0.7, max_new_tokens=args.tokens, seed=0, batch_size=args.batch)
    pad = tokenizer.pad_token_id
    group_rows = [p for p in prompts for _ in range(args.group)]
    group_ids = encode_prompt_ids(tokenizer, group_rows)
    samples = {"harness": len(prompts) * args.n, "grpo": len(group_rows)}

    def harness(side):
        backend = TransformersBackend(models[side], no_eos, name=side)
        side_params = params.replace(lora=lora_mode.get(side, "peft"))

        def run(r):
            with _strided_head() if side == "before" else contextlib.nullcontext():
                got = dict(backend.generate_stream(prompts, side_params))
            assert len(got) == len(prompts)

        return run

    def grpo(side):
        settings = SamplerSettings(
            max_new_tokens=args.tokens, temperature=0.7, top_p=1.0, top_k=0, min_p=None, eos_ids=(), pad_id=pad,
            decode="auto", lora=lora_mode.get(side, "peft"),
        )  # fmt: skip

        def run(r):
            with _strided_head() if side == "before" else contextlib.nullcontext():
                drawn = sample_completions(models[side], group_ids, group_rows, 1000 + r, settings)
            assert all(len(c) == args.tokens for c in drawn)  # the same answer lengths on every side

        return run

    timings = {}
    for where, make in (("harness", harness), ("grpo", grpo)):
        cpu: dict[str, list[float]] = {}
        print(f"timing {where}: {', '.join(sides)}", file=sys.stderr)
        wall = _common.alternate({s: make(s) for s in sides}, reps=args.reps, warmup=1, cpu_times=cpu)
        rates = {s: [samples[where] / t for t in cpu[s]] for s in sides}
        timings[where] = {
            s: {
                "cpu_seconds": _common.summary(cpu[s]),
                "seconds": _common.summary(wall[s]),
                "samples_per_cpu_second": samples[where] * len(cpu[s]) / sum(cpu[s]),
                "ratio_to_base": _common.paired_ratio(rates[s], rates["base"]),
            }
            for s in sides
        }

    quality = {}
    if not args.skip_quality:
        problems = load_problems(task, "validation", args.problems)
        study = SamplingParams(n=args.n, temperature=0.7, max_new_tokens=64, seed=0, batch_size=16)
        study = study.replace(stop=task.stop_strings)
        ordered = [p["prompt"] for p in problems]
        texts, per = {}, {}
        for side, mode in (("peft", "peft"), ("fast", "base_dtype")):
            print(f"pass@1 {side}: {len(problems)} x {args.n}", file=sys.stderr)
            backend = TransformersBackend(adapter, tokenizer, name=side)
            texts[side] = backend.generate(ordered, study.replace(lora=mode))
            per[side] = [
                sum(task.is_correct(t, p["answer"]) for t in ts) / args.n
                for p, ts in zip(problems, texts[side], strict=True)
            ]
        same = sum(a == b for x, y in zip(texts["fast"], texts["peft"], strict=True) for a, b in zip(x, y, strict=True))
        quality["pass@1"] = {s: bootstrap_mean_ci(per[s]).to_dict() for s in per}
        quality["pass@1_fast_minus_peft"] = bootstrap_paired_difference_ci(per["fast"], per["peft"]).to_dict()
        quality["identical_samples"] = same / (len(problems) * args.n)

        # per-token log-prob gap on completions the exact path drew (their prompts' ids, their tokens re-encoded)
        rows = [(p["prompt"], t) for p, ts in zip(problems, texts["peft"], strict=True) for t in ts if t]
        rows = rows[: args.logprob_samples]
        prompt_ids = encode_prompt_ids(tokenizer, [p for p, _ in rows])
        completions = [tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in rows]
        exact = _token_log_probs(adapter, prompt_ids, completions)
        full, _ = load_model_and_tokenizer(args.adapter, device="cpu", dtype=torch.float32, merge_adapter=False)
        scored = {
            "fast": _token_log_probs(adapter, prompt_ids, completions, fast=True),
            "merged_bf16": _token_log_probs(merged, prompt_ids, completions),
            "float32_base": _token_log_probs(full, prompt_ids, completions),
            "no_adapter": _token_log_probs(base, prompt_ids, completions),
        }
        quality["log_prob_gap_to_peft"] = {
            name: {
                "mean_abs": (lp - exact).abs().mean().item(),
                "p99_abs": (lp - exact).abs().quantile(0.99).item(),
                "max_abs": (lp - exact).abs().max().item(),
                "tokens": exact.numel(),
            }
            for name, lp in scored.items()
        }

    rows = []
    for where in timings:
        for s in sides:
            t = timings[where][s]
            ratio = t["ratio_to_base"]
            rows.append(
                [
                    where,
                    s,
                    f"{t['samples_per_cpu_second']:.2f}",
                    f"{ratio['median_of_ratios']:.2f}x ({', '.join(f'{v:.2f}' for v in ratio['values'])})",
                ]
            )
    table = _common.markdown_table(["path", "side", "samples / CPU s", "/ base (per repetition)"], rows)
    passed = all(timings[w]["fast"]["ratio_to_base"]["median_of_ratios"] >= TARGET for w in timings)
    if quality:
        p1, diff = quality["pass@1"], quality["pass@1_fast_minus_peft"]
        table += (
            f"\n\npass@1 ({args.problems} validation problems x {args.n}): peft {p1['peft']['estimate']:.3f}, fast "
            f"{p1['fast']['estimate']:.3f}; fast - peft {diff['estimate']:+.3f} [{diff['low']:+.3f}, "
            f"{diff['high']:+.3f}] (paired 95%); identical samples {quality['identical_samples']:.1%}."
        )
        gaps = quality["log_prob_gap_to_peft"]
        table += "\n\nper-token log-prob |gap| to PEFT's forward (mean / p99 / max, nats): " + "; ".join(
            f"{k} {v['mean_abs']:.4f} / {v['p99_abs']:.4f} / {v['max_abs']:.3f}" for k, v in gaps.items()
        )
        passed = passed and diff["low"] <= 0 <= diff["high"]
    table += (
        f"\n\n{args.timing_problems} prompts x {args.n} (harness, {args.batch} a batch) and x {args.group} (GRPO), "
        f"{args.tokens} new tokens every sample, bf16, 1 thread, {args.reps} repetitions alternated after a warm-up; "
        f"adapter {shown}. Target fast/base >= {TARGET}x in both, pass@1 within noise: "
        f"{_common.verdict(passed)}."
    )
    payload = {
        "params": vars(args) | {"adapter": shown},
        "device": "cpu",
        "task_kwargs": TASK_KWARGS,
        "load_average_start": load_start,
        "timings": timings,
        "quality": quality,
        "target": f"fast / base >= {TARGET}x samples per CPU second (harness and GRPO), pass@1 paired interval holds 0",
        "pass": passed,
        "load_average": _common.load_average(),
    }
    _common.write_results(args.out_name, payload, table)
    return payload


if __name__ == "__main__":
    main()
