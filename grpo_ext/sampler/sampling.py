"""Transformers sampling backend: many samples per prompt, batched, seeded, with a progress bar.

Decoding is continuous batching (:mod:`grpo_ext.sampler.continuous`): ``batch_size * n`` slots (at most
:data:`MAX_SLOTS`) share one KV cache and a slot whose sample ends takes the next sample at once, instead of a batch
running until its longest row stops; each prompt is prefilled once for its ``n`` samples (lm-eval's HF backend, and
``generate(num_return_sequences=n)``, prefill every copy). Where a model cannot be decoded that way
(encoder-decoder models, caches that are not plain per-layer keys/values) the sampler falls back to
``model.generate``.

Determinism: sample ``i`` of a prompt draws its tokens from a counter-based random stream seeded by
``(seed, prompt, i)`` (see :func:`derive_seed`, :func:`~grpo_ext.sampler.continuous.counter_uniforms`), so a
sample is the same whatever ran before, whatever the batch size or the other prompts of the call, and after a
resume; the caller's global RNG is never touched. (The ``generate`` fallback seeds each batch from its prompts
inside ``torch.random.fork_rng``: deterministic for a given batching.)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

from grpo_ext.sampler.continuous import ContinuousUnsupported, continuous_sample, left_pad
from grpo_ext.sampler.lora_sampling import LORA_MODES
from grpo_ext.sampler.static_step import DECODE_MODES
from grpo_ext.sampler.stops import StopChecker, check_stop, cut_at_stop, stop_criteria

logger = logging.getLogger(__name__)

__all__ = [
    "SamplingParams",
    "derive_seed",
    "encode_prompt_ids",
    "encode_prompts",
    "max_slots",
    "sample",
    "sample_seed",
    "sample_stream",
]

#: At most this many slots (rows decoding at once) share the sampler's KV cache, whatever ``batch_size * n``: its
#: memory grows with the slots (n = 1024 would otherwise decode 1024 rows at once). The samples do not depend on it.
MAX_SLOTS = 512
#: ... and on a CPU at most this many: a CPU decode step costs in proportion to its rows, so more slots buy no speed,
#: only memory (the SFT start's test prompts at n = 64, fp32, one thread, before the decoder's bound on the samples in
#: flight: 512 and 128 slots sampled 57 and 59 samples a CPU second, at a peak of 6.8 and 4.4 GB).
MAX_CPU_SLOTS = 128


def max_slots(device) -> int:
    """The most slots the sampler decodes at once on ``device``: :data:`MAX_CPU_SLOTS` on a CPU, else
    :data:`MAX_SLOTS`."""
    return MAX_CPU_SLOTS if torch.device(device).type == "cpu" else MAX_SLOTS


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` completions per prompt at ``temperature`` / ``top_p``, at most ``max_new_tokens``.

    ``temperature == 0`` means greedy decoding (then ``n`` must be 1). ``batch_size`` is the number of *prompts*
    per forward batch (each expanded to ``n`` sequences, so a batch holds ``batch_size * n`` rows). ``decode`` is the
    continuous sampler's decode step (:mod:`grpo_ext.sampler.static_step`): ``auto`` (compiled, CUDA graphs, where
    the model is on CUDA; the eager step elsewhere), ``eager``, ``static`` (fixed shapes, not compiled) or
    ``compiled``. ``stop``: stop strings (:mod:`grpo_ext.sampler.stops`): a sample ends as soon as its text holds
    one, and its text is cut before the one completed first, as lm-eval's ``until`` cuts it (empty: EOS and
    ``max_new_tokens`` only). ``lora``: how a PEFT LoRA adapter computes while the continuous sampler decodes
    (:class:`~grpo_ext.sampler.lora_sampling.LoraSampling`): ``base_dtype`` (default), its product in the base weights'
    dtype, A and B cast once a call; ``peft``, PEFT's own forward (a float32 adapter beside a bf16 base computes in
    float32).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    batch_size: int = 8
    decode: str = "auto"
    stop: tuple[str, ...] = ()
    lora: str = "base_dtype"

    def __post_init__(self):
        # a list (from JSON or YAML) or one string is accepted and kept as a tuple: the dataclass stays hashable
        object.__setattr__(self, "stop", check_stop(self.stop, "SamplingParams.stop"))
        for name in ("n", "max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SamplingParams.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"SamplingParams.seed must be an integer >= 0, got {self.seed!r}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"SamplingParams.temperature must be a finite number >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if self.temperature == 0 and self.n != 1:
            raise ValueError(f"greedy decoding (temperature=0) gives one completion per prompt; got n={self.n}")
        if self.decode not in DECODE_MODES:
            raise ValueError(f"SamplingParams.decode must be one of {', '.join(DECODE_MODES)}; got {self.decode!r}")
        if self.lora not in LORA_MODES:
            raise ValueError(f"SamplingParams.lora must be one of {', '.join(LORA_MODES)}; got {self.lora!r}")

    def key(self) -> str:
        """A stable string naming the sample *distribution* and seed, used to match cached samples.

        ``n`` is left out on purpose (samples are indexed, so raising ``n`` reuses the first ones and draws only
        the rest), and so are ``batch_size``, ``decode`` and ``lora`` (execution details: every decode step attends to
        the same keys/values and draws with the same per-sample uniforms, so the samples are the same, tests/
        test_static_decode.py; on a GPU, as across batch sizes, only float rounding of the kernels may differ; ``lora``
        changes only the rounding of the adapter's share, benchmarks/lora_sampling.py).

        ``stop`` is in the key when it is not empty (samples cut elsewhere are other samples), as the sorted set of
        its strings (the cut does not depend on their order or repeats); without stop strings the key is the one
        the cache and the committed reports have always used.
        """
        key = (
            f"temperature={float(self.temperature)!r},top_p={float(self.top_p)!r},"
            f"max_new_tokens={self.max_new_tokens},seed={self.seed}"
        )
        if self.stop:
            key += f",stop={json.dumps(sorted(set(self.stop)), ensure_ascii=True)}"
        return key

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> SamplingParams:
        return replace(self, **changes)


def derive_seed(*parts) -> int:
    """A 63-bit seed from any printable parts (stable across processes and Python versions)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def encode_prompt_ids(tokenizer, prompts: Sequence) -> list[list[int]]:
    """Token ids of each prompt as TRL feeds it to the policy.

    A string prompt is tokenized with the tokenizer's own special tokens (as TRL's GRPOTrainer does: a BOS if the
    tokenizer adds one); a conversational prompt (a list of ``{"role", "content"}`` messages) is rendered with the
    chat template and its generation prompt.
    """
    ids = []
    for prompt in prompts:
        if isinstance(prompt, str):
            ids.append(tokenizer(prompt)["input_ids"])
        else:
            text = tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
            ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    if any(len(row) == 0 for row in ids):
        raise ValueError("a prompt tokenizes to nothing: every prompt needs at least one token")
    return ids


def encode_prompts(tokenizer, prompts: Sequence, device) -> dict:
    """Left-padded ``input_ids``/``attention_mask`` of :func:`encode_prompt_ids`, for ``generate``."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, attention_mask = left_pad(encode_prompt_ids(tokenizer, prompts), pad)
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def sample_seed(seed: int, prompt, i: int) -> int:
    """The seed of sample ``i`` of ``prompt`` (a string or a conversation) in a call seeded ``seed``: the same draw
    whatever ``n``, batch or run it is part of. The prompt's text is the key, so two problems with the same prompt get
    the same samples (as a model would be asked the same question twice with the same seed)."""
    return derive_seed(seed, str(prompt), i)


def _seeds(params: SamplingParams, prompt) -> list[int]:
    """One seed per sample of ``prompt`` (:func:`sample_seed`)."""
    return [sample_seed(params.seed, prompt, i) for i in range(params.n)]


def _generate_fallback(model, tokenizer, prompts: list, params: SamplingParams, gen_kwargs: dict, device):
    """Plain ``generate(num_return_sequences=n)`` a batch of ``batch_size`` prompts at a time (models the
    continuous engine cannot decode): each batch seeded from its prompts, inside ``fork_rng``. Stop strings end a row
    through a stopping criterion that reads its new tokens as the continuous sampler does (not transformers'
    ``stop_strings``, which also reads the prompt: :mod:`grpo_ext.sampler.stops`); the texts are cut after."""
    fork_devices = [device] if device.type == "cuda" else []
    for start in range(0, len(prompts), params.batch_size):
        batch = prompts[start : start + params.batch_size]
        enc = encode_prompts(tokenizer, batch, device)
        width = enc["input_ids"].shape[1]
        with torch.random.fork_rng(devices=fork_devices):
            torch.manual_seed(derive_seed(params.seed, params.n, *map(str, batch)))
            generated = model.generate(
                **enc,
                num_return_sequences=params.n,
                stopping_criteria=stop_criteria(tokenizer, params.stop, width),
                **gen_kwargs,
            )
        texts = tokenizer.batch_decode(generated[:, width:], skip_special_tokens=True)
        texts = [cut_at_stop(text, params.stop) for text in texts]
        for i in range(len(batch)):
            yield start + i, texts[i * params.n : (i + 1) * params.n]


def _texts(tokenizer, samples: list[list[int]], stop: tuple[str, ...]) -> list[str]:
    """The samples' texts, special tokens stripped, each cut before its stop string (the sampler ended it with the
    token that completed it)."""
    texts = tokenizer.batch_decode(samples, skip_special_tokens=True)
    return [cut_at_stop(text, stop) for text in texts] if stop else texts


@torch.no_grad()
def sample_stream(
    model,
    tokenizer,
    prompts: Sequence,
    params: SamplingParams,
    *,
    progress: bool = True,
    continuous: bool | None = None,
) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(prompt index, its params.n completions)`` as each prompt's samples are done (not in prompt order).

    ``continuous``: None (default) decodes with continuous batching (:mod:`grpo_ext.sampler.continuous`,
    ``batch_size * n`` slots, at most :func:`max_slots`) where the model allows it and falls back to ``generate``
    otherwise; True asks for it (a warning when it cannot run); False always uses ``generate``. The model is in eval
    mode while sampling. Each text is cut before ``params.stop``'s stop string completed first; both paths end a
    sample at the token that completes it. The continuous sampler's sample with stop strings is its sample without
    them, cut (each sample has its own random stream); the ``generate`` fallback's were too on CPU in the tests (its
    stream is the batch's: a finished row still draws, discarded, so the other rows' draws did not move).
    """
    prompts = list(prompts)
    if not prompts:
        return
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    bar = tqdm(total=len(prompts) * params.n, desc="sampling", unit="sample", disable=not progress)
    try:
        stream = None
        if continuous is not False:
            ids = encode_prompt_ids(tokenizer, prompts)
            stream = continuous_sample(
                model,
                ids,
                [_seeds(params, prompt) for prompt in prompts],
                max_new_tokens=params.max_new_tokens,
                temperature=float(params.temperature),
                top_p=float(params.top_p),
                slots=min(params.batch_size * params.n, max_slots(device)),
                prefill_batch=params.batch_size,
                eos_ids=[] if eos is None else [eos],
                pad_id=pad,
                decode=params.decode,
                stop=StopChecker(tokenizer, params.stop) if params.stop else None,
                lora=params.lora,
            )
            try:
                first = next(stream, None)
            except ContinuousUnsupported as why:
                (logger.warning if continuous else logger.info)("continuous batching not used (%s): generate", why)
                stream = None
            else:
                stream = itertools.chain([first] if first else [], stream)
                stream = ((j, _texts(tokenizer, samples, params.stop)) for j, samples in stream)
        if stream is None:
            gen_kwargs = {"max_new_tokens": params.max_new_tokens, "pad_token_id": pad, "eos_token_id": eos}
            if params.temperature > 0:
                gen_kwargs.update(
                    do_sample=True, temperature=float(params.temperature), top_p=float(params.top_p), top_k=0
                )
            else:
                gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            stream = _generate_fallback(model, tokenizer, prompts, params, gen_kwargs, device)
        for j, texts in stream:
            bar.update(len(texts))
            yield j, texts
    finally:
        bar.close()
        model.train(was_training)


def sample(
    model,
    tokenizer,
    prompts: Sequence,
    params: SamplingParams,
    *,
    progress: bool = True,
    continuous: bool | None = None,
) -> list[list[str]]:
    """``params.n`` completions for each prompt, in prompt order, special tokens stripped (see
    :func:`sample_stream`). Prompts are strings or conversations (lists of chat messages), as TRL takes them."""
    prompts = list(prompts)
    out: list[list[str] | None] = [None] * len(prompts)
    for j, texts in sample_stream(model, tokenizer, prompts, params, progress=progress, continuous=continuous):
        out[j] = texts
    return out
