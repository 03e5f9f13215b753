"""One minibatch's gradient on the model's device (GRPO on sampled groups, SFT on reference solutions) and
:func:`measure_signal`, the mean pairwise cosine of independent minibatches (see
:mod:`grpo_ext.experiments.study.signal` for the method)."""

from __future__ import annotations

import contextlib
import time

import torch
from tqdm.auto import tqdm

from grpo_ext.advantages import outcome_advantages, zero_std_mask
from grpo_ext.errors import UserError
from grpo_ext.experiments.study.signal.cosines import (
    CONFIDENCE,
    LOSS_TYPES,
    jackknife_interval,
    pairwise_cosine,
    row_weights,
    surrogate_loss,
)
from grpo_ext.experiments.study.spec import OBJECTIVES
from grpo_ext.rollouts import SamplerSettings, sample_completions
from grpo_ext.sampler.sampling import encode_prompt_ids

__all__ = [
    "OBJECTIVES",
    "completion_logps",
    "grpo_minibatch",
    "measure_grid",
    "measure_signal",
    "minibatch_gradient",
    "sft_minibatch",
]


def completion_logps(model, prompt_ids, completion_ids, temperature: float = 1.0, pad_id: int = 0):
    """``(logps, mask)``, both ``(B, W - 1)``: the log-probability of every next token of ``prompt + completion``
    (right-padded to width ``W``) and a mask of the completion tokens. Each row starts at position 0, as it was
    sampled (TRL's left-padded prompts shift the positions of short prompts). Logits are divided by ``temperature``
    as TRL does."""
    device = next(model.parameters()).device
    seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs], device=device)
    attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device)
    # next-token position t predicts token t + 1: the completion's tokens are predicted from len(prompt) - 1 on
    start = torch.tensor([len(p) - 1 for p in prompt_ids], device=device).unsqueeze(1)
    end = start + torch.tensor([len(c) for c in completion_ids], device=device).unsqueeze(1)
    positions = torch.arange(width - 1, device=device)
    mask = ((positions >= start) & (positions < end)).float()
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float() / temperature
    logps = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return logps, mask


def minibatch_gradient(
    model,
    prompt_ids,
    completion_ids,
    coefficients: torch.Tensor,
    weights: torch.Tensor,
    *,
    temperature: float = 1.0,
    micro_batch: int = 64,
    pad_id: int = 0,
) -> torch.Tensor:
    """The flattened float32 gradient of :func:`surrogate_loss` over the model's trainable parameters (LoRA's only,
    for a PEFT model), accumulated ``micro_batch`` rows at a time (the weights already hold the whole minibatch's
    normaliser, so the sum is the full batch's gradient)."""
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    for start in range(0, len(prompt_ids), micro_batch):
        rows = slice(start, start + micro_batch)
        logps, mask = completion_logps(model, prompt_ids[rows], completion_ids[rows], temperature, pad_id)
        surrogate_loss(logps, mask, coefficients[rows], weights[rows]).backward()
    grad = torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1).float() for p in params])
    model.zero_grad(set_to_none=True)
    return grad


def _pad_id(tokenizer) -> int:
    return tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id


def grpo_minibatch(model, tokenizer, task, rows, group_size: int, settings: SamplerSettings, seed: int):
    """``(prompt ids, completion ids, advantages, rewards)`` of one GRPO step on the dataset slice ``rows``:
    ``group_size`` completions a prompt, laid out group by group as TRL lays them out."""
    device = next(model.parameters()).device
    prompts = [p for p in rows["prompt"] for _ in range(group_size)]
    answers = [a for a in rows["answer"] for _ in range(group_size)]
    prompt_ids = encode_prompt_ids(tokenizer, prompts)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            completion_ids = sample_completions(model, prompt_ids, prompts, seed, settings)
    finally:
        model.train(was_training)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)  # the text TRL's reward functions get
    rewards = torch.tensor(
        task.outcome_reward(prompts=prompts, completions=texts, answer=answers), dtype=torch.float32, device=device
    )
    return prompt_ids, completion_ids, outcome_advantages(rewards, group_size), rewards


def sft_minibatch(tokenizer, rows):
    """``(prompt ids, completion ids)``: the reference ``solution`` of each prompt of ``rows``, EOS appended (as the
    base was fine-tuned and as TRL's SFTTrainer appends it)."""
    if "solution" not in rows.column_names:
        raise UserError(f"objective sft: the task has no reference solutions (columns: {rows.column_names})")
    completion_ids = [
        tokenizer(s, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for s in rows["solution"]
    ]
    return encode_prompt_ids(tokenizer, rows["prompt"]), completion_ids


@contextlib.contextmanager
def _lora(model, rank: int, seed: int):
    """``model`` with fresh LoRA adapters of rank ``rank`` on every linear projection (PEFT's ``all-linear``, alpha
    ``2 r`` as ``configs/qlora.yaml``), removed afterwards. LoRA's B starts at 0, so at the starting point only B
    has a gradient; A is drawn from a seeded, forked generator (repeatable, the caller's RNG untouched)."""
    if not rank:
        yield model
        return
    from peft import LoraConfig, get_peft_model

    trainable = {name: p.requires_grad for name, p in model.named_parameters()}  # PEFT freezes the base
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear")
        peft_model = get_peft_model(model, config)
    try:
        yield peft_model
    finally:
        peft_model.unload()  # the base modules back in place of the LoRA layers
        for name, p in model.named_parameters():
            p.requires_grad_(trainable.get(name, p.requires_grad))


def measure_signal(
    model,
    tokenizer,
    task,
    objective: str,
    samples: int,
    minibatches: int,
    *,
    group_size: int = 8,
    lora_rank: int = 0,
    train_offset: int = 0,
    max_completion_length: int = 48,
    loss_type: str = "dapo",
    temperature: float = 1.0,
    seed: int = 0,
    micro_batch: int = 64,
    decode: str = "auto",
    progress: bool = True,
) -> dict:
    """The mean pairwise gradient cosine of ``minibatches`` independent minibatches of ``samples`` samples a step
    (``grpo``: ``samples / group_size`` prompts x ``group_size``; ``sft``: ``samples`` prompts), on the model's device,
    over all parameters or (``lora_rank > 0``) over fresh LoRA adapters only; ``model`` is left as it was."""
    if objective not in OBJECTIVES:
        raise UserError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)}")
    group = group_size if objective == "grpo" else 1
    if samples < group or samples % group:
        raise UserError(f"samples: {samples} is not a positive multiple of the group size {group}")
    if minibatches < 2:
        raise UserError(f"minibatches: need at least 2 to compare, got {minibatches}")
    if lora_rank < 0 or train_offset < 0:
        raise UserError(f"lora_rank and train_offset must be >= 0, got {lora_rank} and {train_offset}")
    if loss_type not in LOSS_TYPES:  # before any sampling
        raise UserError(f"loss_type: {loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
    prompts = samples // group
    train = task.load("train", train_offset + minibatches * prompts)
    device = next(model.parameters()).device
    pad = _pad_id(tokenizer)
    settings = SamplerSettings(max_completion_length, temperature, 1.0, 0, None, (tokenizer.eos_token_id,), pad, decode)
    started = time.perf_counter()
    grads, norms, zero_std, reward_means = [], [], [], []
    was_training = model.training
    try:
        with _lora(model, lora_rank, seed) as policy:
            trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
            for k in tqdm(range(minibatches), desc=f"{objective} {samples} r{lora_rank}", disable=not progress):
                first = train_offset + k * prompts  # consecutive, disjoint slices: never a prompt twice
                rows = train.select(range(first, first + prompts))
                if objective == "grpo":
                    prompt_ids, completion_ids, coefficients, rewards = grpo_minibatch(
                        policy, tokenizer, task, rows, group, settings, seed
                    )
                    zero_std.append(float(zero_std_mask(rewards, group).float().mean()))
                    reward_means.append(float(rewards.mean()))
                else:
                    prompt_ids, completion_ids = sft_minibatch(tokenizer, rows)
                    coefficients = torch.ones(len(prompt_ids), device=device)
                lengths = torch.tensor([len(c) for c in completion_ids], device=device)
                weights = row_weights(lengths, loss_type if objective == "grpo" else "dapo", max_completion_length)
                policy.train()  # the loss as the trainer computes it (dropout, if any, included)
                grad = minibatch_gradient(
                    policy,
                    prompt_ids,
                    completion_ids,
                    coefficients,
                    weights,
                    temperature=temperature if objective == "grpo" else 1.0,
                    micro_batch=micro_batch,
                    pad_id=pad,
                )
                grads.append(grad)
                norms.append(float(grad.norm()))
    finally:
        model.train(was_training)

    _, pairs = pairwise_cosine(grads)
    interval = jackknife_interval(pairs, minibatches)
    return {
        "objective": objective,
        "samples": samples,
        "prompts": prompts,
        "group_size": group,
        "lora_rank": lora_rank,
        "trainable_parameters": trainable,
        "minibatches": minibatches,
        "mean_cosine": interval["mean"],
        "standard_error": interval["standard_error"],
        "low": interval["low"],
        "high": interval["high"],
        "interval": f"{CONFIDENCE:.0%} jackknife over minibatches (t, {minibatches - 1} df)",
        "zero_std_share": sum(zero_std) / len(zero_std) if zero_std else None,
        "reward_mean": sum(reward_means) / len(reward_means) if reward_means else None,
        "grad_norms": norms,
        "pair_cosines": pairs.tolist(),
        "train_offset": train_offset,
        "loss_type": loss_type if objective == "grpo" else "token mean (SFT)",
        "seconds": round(time.perf_counter() - started, 2),
    }


def measure_grid(
    model, tokenizer, task, objectives, samples, minibatches: int, lora_ranks=(0,), **settings
) -> list[dict]:
    """:func:`measure_signal` of every objective x LoRA rank x samples a step, in that order (``settings``: its
    keyword arguments)."""
    return [
        measure_signal(model, tokenizer, task, objective, size, minibatches, lora_rank=rank, **settings)
        for objective in objectives
        for rank in lora_ranks
        for size in samples
    ]
