"""Continuous batching for sampling with a transformers model: decoding slots refilled as soon as a sample ends.

``model.generate`` on a batch runs every row until the longest one stops, so rows that hit EOS early keep costing
a forward pass each token: on the embedded task (completions of 10-40 tokens) 30-40% of the work of a 64-row batch
is spent on finished rows. Here a fixed number of *slots* share one KV cache; each step runs one token for every
slot, and a slot whose sample ended takes the next sample at once (as vLLM and TGI do, without paged memory). The
rest follows from that:

- **Shared prefill.** A prompt goes through the model once; its keys/values are copied into each slot that takes
  one of its ``n`` samples, and each sample's first token is drawn from that one forward pass's logits.
- **One cache, per-slot windows.** All slots write the new token at the same cache column; a slot that joins
  later has its prompt copied into the columns just before it and everything older masked out (the same
  left-padding rule as ``generate``: positions count only the slot's own tokens). When the columns run out, the
  live windows are moved back to the start (:meth:`_SlotCache.compact`); once no sample is waiting, finished
  slots are dropped from the batch.
- **Samples independent of batching.** Sample ``i`` of a prompt draws its ``t``-th token with the uniform
  :func:`counter_uniforms` ``(seed_i, t)``, a pure function of its own seed and position (a counter-based RNG, as
  in JAX or Philox), by inverse CDF. So a sample is the same whatever the batch size, whatever else is being
  sampled, and after a resume: exactly what the sample cache assumes. Greedy decoding equals ``generate``.

Used by :func:`grpo_ext.evaluation.sampling.sample`, which falls back to ``generate`` where this cannot run
(:class:`ContinuousUnsupported`: encoder-decoder models, caches that are not plain per-layer keys/values).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np
import torch

__all__ = ["ContinuousUnsupported", "choose_tokens", "continuous_sample", "counter_uniforms", "left_pad"]

SLACK = lambda window: max(8, window // 4)  # noqa: E731
_GAMMA = np.uint64(0x9E3779B97F4A7C15)


class ContinuousUnsupported(Exception):
    """The model or its cache does not allow slot-wise decoding: use ``generate``."""


def counter_uniforms(seeds: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1), one per ``(seed, counter)`` pair: the splitmix64 finaliser of ``seed + counter * gamma``.

    ``seeds`` and ``counters`` are ``uint64`` arrays (broadcast together). A pure function: the same pair always
    gives the same number, so a sample's random stream does not depend on which batch or slot it runs in.
    """
    seeds = np.asarray(seeds, dtype=np.uint64)
    counters = np.asarray(counters, dtype=np.uint64)
    with np.errstate(over="ignore"):  # modular uint64 arithmetic is the point
        z = seeds + (counters + np.uint64(1)) * _GAMMA
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def choose_tokens(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row of ``logits [R, V]``: argmax when ``temperature == 0``, else an inverse-CDF draw with
    ``uniforms [R]`` from softmax(logits / temperature) restricted to the top-p nucleus (transformers' own
    ``TopPLogitsWarper``, so the nucleus is the one ``generate`` keeps)."""
    if temperature == 0:
        return logits.argmax(-1)
    scores = logits.float() / temperature
    if top_p < 1.0:
        from transformers.generation.logits_process import TopPLogitsWarper

        scores = TopPLogitsWarper(top_p)(None, scores)
    cdf = torch.softmax(scores, dim=-1).double().cumsum(-1)  # float64: no drift over a 150k vocabulary
    target = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(1)
    # the first index whose cumulative probability exceeds the target: never a token of probability 0
    return torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=logits.shape[-1] - 1)


def _forward_accepts(model, name: str) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the forward
    try:
        return name in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token lists padded on the left to the longest (as ``generate`` wants)."""
    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
    return input_ids, attention_mask


def _prefill(model, prompt_ids: Sequence[Sequence[int]], pad_id: int, keep_logits: dict) -> tuple[list, torch.Tensor]:
    """One left-padded forward over whole prompts: ``([per prompt: [(keys, values) per layer]], last logits [B, V])``.

    Keys/values are sliced to each prompt's own tokens (``[heads, length, head_dim]``), ready to copy into slots.
    """
    from transformers.cache_utils import DynamicCache, DynamicLayer

    device = next(model.parameters()).device
    input_ids, attention_mask = left_pad(prompt_ids, pad_id)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_(min=0)  # generate's rule for left padding
    out = model(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        use_cache=True,
        return_dict=True,
        **keep_logits,
    )
    cache = getattr(out, "past_key_values", None)
    if not isinstance(cache, DynamicCache) or not cache.layers:
        raise ContinuousUnsupported(f"the model returned a {type(cache).__name__}, not a DynamicCache")
    for layer in cache.layers:  # sliding-window, quantised or recurrent layers cannot be copied slot-wise
        if type(layer) is not DynamicLayer or layer.keys is None or layer.keys.ndim != 4:
            raise ContinuousUnsupported(f"cache layer {type(layer).__name__} is not plain keys/values")
    width = input_ids.shape[1]
    per_prompt = [
        [(layer.keys[row, :, width - len(ids) :], layer.values[row, :, width - len(ids) :]) for layer in cache.layers]
        for row, ids in enumerate(prompt_ids)
    ]
    return per_prompt, out.logits[:, -1, :].float()


def _slot_layer_class():
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """One layer's keys/values for every slot: ``[slots, heads, capacity, head_dim]`` buffers of which columns
        ``[0, length)`` are in use; ``update`` writes the step's column in place (no ``torch.cat`` of the cache)."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor):
            super().__init__()
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self.buffer_keys, self.buffer_values, self.length = keys, values, 0
            self.view()

        def view(self) -> None:
            self.keys = self.buffer_keys[:, :, : self.length]
            self.values = self.buffer_values[:, :, : self.length]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.length + key_states.shape[-2]
            self.buffer_keys[:, :, self.length : end] = key_states
            self.buffer_values[:, :, self.length : end] = value_states
            self.length = end
            self.view()
            return self.keys, self.values

    return SlotLayer


class _SlotCache:
    """The shared KV cache of all slots, the attention mask saying which columns each slot sees, and its moves."""

    def __init__(self, prompt_kv: list, slots: int, capacity: int, device):
        from transformers.cache_utils import Cache

        layer_class = _slot_layer_class()
        layers = []
        for keys, _ in prompt_kv:  # zeros, not empty: masked columns must hold finite numbers (0 * NaN = NaN)
            shape = (slots, keys.shape[0], capacity, keys.shape[-1])
            layers.append(layer_class(keys.new_zeros(shape), keys.new_zeros(shape)))
        self.cache = Cache(layers=layers)
        self.mask = torch.zeros((slots, capacity), dtype=torch.long, device=device)
        self.capacity = capacity

    @property
    def length(self) -> int:
        return self.cache.layers[0].length

    def place(self, slots: torch.Tensor, kv: list) -> None:
        """Copy one prompt's keys/values into ``slots``, ending at the current column; mask out the rest."""
        length, end = kv[0][0].shape[-2], self.length
        for layer, (keys, values) in zip(self.cache.layers, kv, strict=True):
            layer.buffer_keys[slots, :, end - length : end] = keys
            layer.buffer_values[slots, :, end - length : end] = values
        self.mask[slots] = 0
        self.mask[slots, end - length : end] = 1

    def compact(self, keep: int, room_before: int) -> None:
        """Move the last ``keep`` columns (every live slot's window) to end at column ``max(keep, room_before)``."""
        end, new_end = self.length, max(keep, room_before)
        for layer in self.cache.layers:
            for buffer in (layer.buffer_keys, layer.buffer_values):
                buffer[:, :, new_end - keep : new_end] = buffer[:, :, end - keep : end].clone()
            layer.length = new_end
            layer.view()
        window = self.mask[:, end - keep : end].clone()
        self.mask.zero_()
        self.mask[:, new_end - keep : new_end] = window

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` of the batch (finished slots dropped once nothing waits for a slot)."""
        for layer in self.cache.layers:
            layer.buffer_keys, layer.buffer_values = layer.buffer_keys[rows], layer.buffer_values[rows]
            layer.view()
        self.mask = self.mask[rows]


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
) -> Iterator[tuple[int, list[list[int]]]]:
    """Yield ``(prompt index, its samples' new token ids)`` as each prompt's samples are all finished.

    ``seeds[j]`` holds one 64-bit seed per sample of prompt ``j`` (so ``len(seeds[j])`` samples are drawn). A
    sample ends with an EOS token (kept in its ids) or after ``max_new_tokens``. ``slots`` rows decode at once;
    ``prefill_batch`` prompts are prefilled a forward pass at a time. Raises :class:`ContinuousUnsupported` before
    yielding anything when the model cannot be decoded slot-wise.
    """
    if getattr(model.config, "is_encoder_decoder", False):
        raise ContinuousUnsupported("encoder-decoder model")
    if getattr(getattr(model, "generation_config", None), "cache_implementation", None) is not None:
        raise ContinuousUnsupported("the model's generation config asks for its own cache implementation")
    for name in ("past_key_values", "position_ids", "attention_mask"):
        if not _forward_accepts(model, name):
            raise ContinuousUnsupported(f"the model's forward takes no {name}")
    keep_logits = {"logits_to_keep": 1} if _forward_accepts(model, "logits_to_keep") else {}
    device = next(model.parameters()).device
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    uniform = lambda seed_array, counters: torch.from_numpy(counter_uniforms(seed_array, counters))  # noqa: E731

    results: list[list[list[int] | None]] = [[None] * len(s) for s in seeds]
    left = [len(s) for s in seeds]  # samples of each prompt not finished yet
    waiting: deque[tuple[int, int, int]] = deque()  # (prompt, sample, first token) ready to take a slot
    prompt_kv: dict[int, list] = {}  # prompt -> its keys/values while some of its samples still wait
    next_prompt = 0
    cache: _SlotCache | None = None
    # per slot: the sample it holds (-1: free), its seed, tokens drawn so far, its input and position for the step
    owner = [(-1, -1)] * slots
    slot_seed = np.zeros(slots, dtype=np.uint64)
    drawn = torch.zeros(slots, dtype=torch.long)
    tokens = torch.zeros((slots, max_new_tokens), dtype=torch.long)
    step_input = torch.full((slots,), pad_id, dtype=torch.long, device=device)
    position = torch.zeros(slots, dtype=torch.long, device=device)

    def finish(j: int, i: int, ids: list[int]) -> Iterator[tuple[int, list[list[int]]]]:
        results[j][i] = ids
        left[j] -= 1
        if left[j] == 0:
            prompt_kv.pop(j, None)
            yield j, results[j]
            results[j] = []  # yielded: drop our reference

    def prefill_more() -> Iterator[tuple[int, list[list[int]]]]:
        """Prefill the next prompts, draw their samples' first tokens; samples that end there finish at once."""
        nonlocal next_prompt, cache
        chunk = list(range(next_prompt, min(next_prompt + prefill_batch, len(prompt_ids))))
        next_prompt = chunk[-1] + 1
        chunk = [j for j in chunk if seeds[j]]
        if not chunk:
            return
        kv, logits = _prefill(model, [prompt_ids[j] for j in chunk], pad_id, keep_logits)
        if cache is None:
            widest = max(len(ids) for ids in prompt_ids)
            window = widest + max_new_tokens  # the most columns one slot ever needs
            cache = _SlotCache(kv[0], slots, window + SLACK(window), device)
        for row, j in enumerate(chunk):
            prompt_kv[j] = kv[row]
            counts = len(seeds[j])
            firsts = choose_tokens(
                logits[row].expand(counts, -1),
                uniform(np.array(seeds[j], dtype=np.uint64), np.zeros(counts, dtype=np.uint64)),
                temperature,
                top_p,
            ).tolist()
            for i, first in enumerate(firsts):
                if max_new_tokens == 1 or first in eos_ids:
                    yield from finish(j, i, [first])
                else:
                    waiting.append((j, i, first))

    def admit() -> None:
        """Give free slots to waiting samples, a prompt's samples together (one copy of its keys/values)."""
        free = [s for s in range(len(owner)) if owner[s][0] < 0]
        chosen = [waiting.popleft() for _ in range(min(len(free), len(waiting)))]
        if not chosen:
            return
        longest = max(len(prompt_ids[j]) for j, _, _ in chosen)
        if cache.length < longest:  # a prompt needs more columns before the current one than there are
            compact(room_before=longest)
        taken: dict[int, list[int]] = {}
        for s, (j, i, first) in zip(free, chosen, strict=False):
            owner[s] = (j, i)
            slot_seed[s] = np.uint64(seeds[j][i])
            drawn[s] = 1
            tokens[s, 0] = first
            step_input[s] = first
            position[s] = len(prompt_ids[j])
            taken.setdefault(j, []).append(s)
        for j, rows in taken.items():
            cache.place(torch.tensor(rows, device=device), prompt_kv[j])
            if not any(w[0] == j for w in waiting):
                prompt_kv.pop(j, None)

    def compact(room_before: int = 0) -> None:
        live = [s for s in range(len(owner)) if owner[s][0] >= 0]
        keep = 0
        if live:  # the widest live window: from its slot's first unmasked column to the current one
            first_col = cache.mask[live, : cache.length].argmax(-1)
            keep = cache.length - int(first_col.min())
        cache.compact(keep, room_before)

    while True:
        while len(waiting) < len(owner) and next_prompt < len(prompt_ids):
            yield from prefill_more()
        if waiting:
            admit()
        live_rows = [s for s in range(len(owner)) if owner[s][0] >= 0]
        if not live_rows:
            if next_prompt >= len(prompt_ids) and not waiting:
                return
            continue
        if not waiting and next_prompt >= len(prompt_ids) and len(live_rows) <= len(owner) // 2:
            rows = torch.tensor(live_rows)
            cache.select(rows.to(device))
            owner = [owner[s] for s in live_rows]
            slot_seed, drawn, tokens = slot_seed[live_rows], drawn[rows], tokens[rows]
            step_input, position = step_input[rows.to(device)], position[rows.to(device)]
            live_rows = list(range(len(owner)))
        if cache.length + 1 > cache.capacity:
            compact()

        column = cache.length
        cache.mask[:, column] = 1  # every slot sees its own new token (free slots too: no fully masked row)
        out = model(
            input_ids=step_input.unsqueeze(1),
            attention_mask=cache.mask[:, : column + 1],
            position_ids=position.unsqueeze(1),
            past_key_values=cache.cache,
            use_cache=True,
            return_dict=True,
            **keep_logits,
        )
        live = torch.tensor(live_rows)
        new = choose_tokens(
            out.logits[live.to(device), -1, :], uniform(slot_seed[live_rows], drawn[live].numpy()), temperature, top_p
        )
        position[live.to(device)] += 1
        step_input[live.to(device)] = new
        tokens[live, drawn[live]] = new.cpu()
        drawn[live] += 1
        ended = torch.isin(new, eos).cpu() | (drawn[live] >= max_new_tokens)
        for k in ended.nonzero().flatten().tolist():
            s = live_rows[k]
            j, i = owner[s]
            owner[s] = (-1, -1)
            position[s] = 0
            yield from finish(j, i, tokens[s, : int(drawn[s])].tolist())
