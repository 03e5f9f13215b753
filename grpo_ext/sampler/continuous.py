"""Continuous batching for sampling many completions per prompt with a transformers model.

``model.generate`` on a batch runs every row until the longest one stops, so rows that hit EOS early keep costing
a forward pass each token (on the embedded task, 30-40% of the rows of a 64-row batch), and it decodes each of a
prompt's ``n`` samples separately even where they coincide. Here a fixed number of *slots* share one KV cache; each
step runs one token for every slot, and a slot whose row ended takes the next waiting row at once (as vLLM and TGI
do, without paged memory). A *row* is a distinct prefix, not a sample:

- **Shared prefill.** A prompt goes through the model once; every sample draws its first token from that forward
  pass's logits.
- **Shared prefixes.** Samples of a prompt that drew the same tokens so far have the same next-token distribution,
  so they ride on one row and cost one forward row per step. When their draws differ the row forks: the new row
  gets a copy of the keys/values (a free slot at once, else it waits). Sampled answers to short problems coincide a
  lot: on the embedded task at T = 1, 16 samples a prompt were ~4 sampled tokens per distinct prefix.
- **One cache, per-slot windows** (:mod:`grpo_ext.sampler.slot_cache`). A row that takes a slot later sees only
  its own columns, as a left-padded row of ``generate`` does; live windows move back to the start when the columns
  run out; once nothing waits, free slots are dropped from the batch.
- **Samples independent of batching** (:mod:`grpo_ext.sampler.token_draws`). Sample ``i`` of a prompt draws its
  ``t``-th token by inverse CDF with a counter-based uniform ``(seed_i, t)``, so a sample is the same whatever the
  batch size, whatever else is being sampled and whichever row it shares, and after a resume: exactly what the
  sample cache assumes. Greedy decoding equals ``generate``.
- **Stop strings end a sample early** (``stop``, :class:`~grpo_ext.sampler.stops.StopChecker`): after each token
  the tail of the sample's text is decoded and checked, so a sample that has written its stop string stops costing
  decode steps at once (its row, or its share of a row, is freed); its tokens up to there are those it draws
  without stop strings.
- **A CPU decode attention in bf16** (:mod:`grpo_ext.sampler.decode_attention`): the decode step of a bf16 / fp16
  model on a CPU attends with plain matmuls and a float32 softmax on the query heads packed by key/value head (eager
  attention's arithmetic without its key/value copies) over the slot cache's contiguous buffers, and a prompt prefix
  that every prompt of the call shares (an instruction, worked examples; at least
  :data:`~grpo_ext.sampler.decoder.SHARED_PREFIX_MIN` tokens) is prefilled once and kept out of the slots: each step
  reads its keys/values once for all rows (cascade attention), the slots hold the rows' own columns only. On the
  real-model study's prompts (~170 shared tokens of ~190) the harness's bf16 sampling took ~1.3x less CPU time with
  both than with ``sdpa`` (``python -m benchmarks.eval_real``).
- **A fixed-shape step for CUDA** (:mod:`grpo_ext.sampler.static_step`, ``decode``): the step can read the whole
  cache with a full-width mask and keep its shapes, so that ``torch.compile`` captures it once (CUDA graphs).

This module is the entry point :func:`continuous_sample` (the decode loop is :mod:`grpo_ext.sampler.decoder`), used by
:func:`grpo_ext.sampler.sampling.sample`, which falls back to ``generate`` where this cannot run
(:class:`ContinuousUnsupported`: encoder-decoder models, caches that are not plain per-layer keys/values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

from grpo_ext.sampler.decoder import Decoder
from grpo_ext.sampler.slot_cache import ContinuousUnsupported, left_pad
from grpo_ext.sampler.token_draws import choose_tokens, counter_uniforms, draw_from_cdf, token_cdf

# Re-exported: this is the sampler's public module (sampling.py and user code import these names from here).
__all__ = [
    "ContinuousUnsupported",
    "choose_tokens",
    "continuous_sample",
    "counter_uniforms",
    "draw_from_cdf",
    "left_pad",
    "token_cdf",
]


@torch.no_grad()
def continuous_sample(
    model,
    prompt_ids: Sequence[Sequence[int]],
    seeds: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    slots: int,
    prefill_batch: int,
    eos_ids: Sequence[int],
    pad_id: int,
    decode: str = "eager",
    compile_options: dict | None = None,
    top_k: int = 0,
    min_p: float | None = None,
    kv_budget: int | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    lora: str = "base_dtype",
) -> Iterator[tuple[int, list[list[int]]]]:
    """Yield ``(prompt index, its samples' new token ids)`` as each prompt's samples are all finished.

    ``seeds[j]`` holds one 64-bit seed per sample of prompt ``j`` (so ``len(seeds[j])`` samples are drawn; a prompt
    with none yields nothing). A sample ends with an EOS token (kept in its ids), a stop string (``stop``) or after
    ``max_new_tokens``. At most ``slots`` rows (distinct prefixes) decode at once; ``prefill_batch`` prompts are
    prefilled a forward pass at a time. Raises :class:`ContinuousUnsupported` before yielding anything when the model
    cannot be decoded this way.

    ``decode`` picks the decode step (:mod:`grpo_ext.sampler.static_step`: ``eager``, ``static``, ``compiled`` or
    ``auto``); the samples do not depend on it. ``compile_options`` are ``torch.compile``'s for ``compiled`` (default
    :data:`~grpo_ext.sampler.static_step.COMPILE_OPTIONS`: inductor with CUDA graphs). ``top_k`` (0: off) and
    ``min_p`` (None: off) restrict the draws as ``generate`` does (after the temperature, around the top-p nucleus).
    ``kv_budget``: the bytes the slots' keys/values may take (None: :data:`~grpo_ext.sampler.decoder.KV_MEMORY_SHARE`
    of the device's free memory); fewer slots than ``slots`` decode when they would not fit, and the samples do not
    change.
    ``stop``: called with a sample's new token ids after each token (:class:`~grpo_ext.sampler.stops.StopChecker`);
    True ends the sample there, its last token kept (the caller cuts the text), as ``generate`` with
    ``stop_strings`` ends a row. The sample's tokens up to there are those it draws without ``stop``.
    ``lora``: how PEFT LoRA layers compute while decoding (:class:`~grpo_ext.sampler.lora_sampling.LoraSampling`):
    ``base_dtype``, the adapter's product in the base weights' dtype, or ``peft``, PEFT's own forward.
    """
    for name, value in (("max_new_tokens", max_new_tokens), ("slots", slots), ("prefill_batch", prefill_batch)):
        if value < 1:  # 0 slots would never decode, 0 prefill_batch never prefill
            raise ValueError(f"continuous_sample: {name} must be >= 1, got {value!r}")
    decoder = Decoder(
        model,
        prompt_ids,
        seeds,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        slots=slots,
        prefill_batch=prefill_batch,
        eos_ids=eos_ids,
        pad_id=pad_id,
        decode=decode,
        compile_options=compile_options,
        top_k=top_k,
        min_p=min_p,
        kv_budget=kv_budget,
        stop=stop,
        lora=lora,
    )
    yield from decoder.run()
