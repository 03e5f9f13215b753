"""Transformers sampling backend: many samples per prompt, batched, seeded, with a progress bar."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    prompts: list[str],
    n: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = True,
) -> list[list[str]]:
    """`n` completions for each prompt (a list of `n` strings per prompt), special tokens stripped.

    `temperature == 0` means greedy decoding (then `n` must be 1). Prompts are left-padded in batches of
    `batch_size` prompts, each expanded to `n` sequences with `num_return_sequences`.
    """
    if temperature == 0 and n != 1:
        raise ValueError(f"greedy decoding (temperature=0) gives one completion per prompt; got n={n}")
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    device = next(model.parameters()).device
    out: list[list[str]] = []
    try:
        for start in tqdm(range(0, len(prompts), batch_size), desc="sampling", disable=not progress, unit="batch"):
            batch = prompts[start : start + batch_size]
            enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
            generated = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **(sampling if temperature > 0 else {"do_sample": False}),
            )
            texts = tokenizer.batch_decode(generated[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            out.extend(texts[i * n : (i + 1) * n] for i in range(len(batch)))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return out
