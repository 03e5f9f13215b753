"""The data of the offline methods of the unified paradigm: the base's samples drawn once (RFT, DPO), which of
them each method trains on (RFT: the correct ones; DPO: (correct, incorrect) pairs), and completions in their
prompt's format (a chat message after a chat prompt). Pure functions but the draw, which samples the base."""

from __future__ import annotations

import gc
import random
import time

from grpo_ext.sampler.sampling import SamplingParams

__all__ = ["as_completion", "cut_at_stop", "dpo_pairs", "distinct_prompts", "draw_from_base", "rft_examples"]


def distinct_prompts(prompts) -> int:
    """How many different prompts: a chat prompt (a list of messages) is compared by its JSON."""
    import json

    return len({p if isinstance(p, str) else json.dumps(p, sort_keys=True) for p in prompts})


def cut_at_stop(text: str, stops) -> str:
    """`text` up to the first of the stop strings `stops` (lm-eval's ``until``: the stop string itself is cut too)."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[: min(found)] if found else text


def draw_from_base(ctx) -> tuple[list[str], list[str], list[list[str]]]:
    """``samples_per_prompt`` completions of the base model for every train prompt: (prompts, answers, samples), each
    cut at the task's stop strings (a base that answers and then writes a new ``Question:`` is judged, and trained
    on, by its answer).

    ``ctx``: the runner's context (:class:`grpo_ext.methods.trainers.RunContext`). Records the draw's cost in
    ``ctx.cost`` (samples, tokens with the EOS of a completion that stopped, seconds).
    """
    import torch

    from grpo_ext.evaluation.backends import load_model_and_tokenizer
    from grpo_ext.sampler.sampling import sample

    method_args = ctx.method_args
    prompts = list(ctx.train_dataset["prompt"])
    answers = [str(a) for a in ctx.train_dataset["answer"]]
    start = time.perf_counter()
    model_id, _, _ = ctx.policy()
    # the base in the dtype it trains in (bf16 on these CPUs: the online methods sample from that same base)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(ctx.model_args.dtype)
    device = "cpu" if ctx.training_args.use_cpu else None
    model, tokenizer = load_model_and_tokenizer(model_id, device=device, dtype=dtype)
    stops = tuple(getattr(ctx.task, "stop_strings", ()))
    params = SamplingParams(
        n=method_args.samples_per_prompt,
        temperature=method_args.sample_temperature,
        max_new_tokens=method_args.sample_max_new_tokens,
        seed=ctx.training_args.seed,
        batch_size=method_args.sample_batch_size,
        stop=stops,
    )
    samples = sample(model, tokenizer, prompts, params, progress=not ctx.training_args.disable_tqdm)
    samples = [[cut_at_stop(text, stops) for text in row] for row in samples]
    tokens = 0
    for row in samples:
        for text in row:
            n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            tokens += min(n + 1, method_args.sample_max_new_tokens)  # + the EOS, unless it stopped on the length cap
    del model
    gc.collect()
    ctx.cost.update(
        samples_generated=len(prompts) * method_args.samples_per_prompt,
        generated_tokens=tokens,
        sampling_seconds=time.perf_counter() - start,
    )
    return prompts, answers, samples


def as_completion(prompt, text: str):
    """A completion in its prompt's format: an assistant message after a conversational prompt (a list of chat
    messages, as word_arithmetic and gsm8k make them), the text itself after a plain one. TRL's SFT and DPO trainers
    refuse a mix (a chat prompt with a string completion), and a chat completion ends with the template's end of turn,
    which is what the policy must learn to write to stop."""
    if isinstance(prompt, list):
        return [{"role": "assistant", "content": text}]
    return text


def rft_examples(task, prompts, answers, samples) -> tuple[list[str], list[str], int]:
    """RFT's gradient coefficient as data: a sample is trained on (GC 1) when it is correct, dropped (GC 0) when
    not; a prompt's repeated correct samples are kept once. Returns (prompts, completions, correct samples)."""
    kept_prompts, kept_completions, n_correct = [], [], 0
    for prompt, answer, row in zip(prompts, answers, samples, strict=True):
        seen: set[str] = set()
        for completion in row:
            if task.is_correct(completion, answer):
                n_correct += 1
                if completion not in seen:
                    seen.add(completion)
                    kept_prompts.append(prompt)
                    kept_completions.append(completion)
    return kept_prompts, kept_completions, n_correct


def dpo_pairs(task, prompts, answers, samples, max_pairs: int, seed: int) -> list[dict]:
    """Up to ``max_pairs`` (chosen = correct, rejected = incorrect) pairs per prompt, from its distinct samples.

    Each pair uses a different correct and a different incorrect sample while there are some left (cycling when
    one side runs out); which ones is a seeded shuffle. Prompts without both kinds give no pair.
    """
    rng = random.Random(seed)
    pairs = []
    for prompt, answer, row in zip(prompts, answers, samples, strict=True):
        distinct = list(dict.fromkeys(row))
        correct = [c for c in distinct if task.is_correct(c, answer)]
        wrong = [c for c in distinct if not task.is_correct(c, answer)]
        if not correct or not wrong:
            continue
        rng.shuffle(correct)
        rng.shuffle(wrong)
        for i in range(min(max_pairs, max(len(correct), len(wrong)))):
            chosen, rejected = correct[i % len(correct)], wrong[i % len(wrong)]
            pairs.append(
                {"prompt": prompt, "chosen": as_completion(prompt, chosen), "rejected": as_completion(prompt, rejected)}
            )
    return pairs
