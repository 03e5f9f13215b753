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
- **One cache, per-slot windows.** All slots write the new token at the same cache column; a row that takes a slot
  later has its keys/values copied into the columns just before it and everything older masked out (the same
  left-padding rule as ``generate``: positions count only the row's own tokens). When the columns run out, the
  live windows are moved back to the start (:meth:`_SlotCache.compact`); once nothing waits, free slots are
  dropped from the batch.
- **Samples independent of batching.** Sample ``i`` of a prompt draws its ``t``-th token by inverse CDF with the
  uniform :func:`counter_uniforms` ``(seed_i, t)``, a pure function of its own seed and position (a counter-based
  RNG, as in JAX or Philox). So a sample is the same whatever the batch size, whatever else is being sampled and
  whichever row it shares, and after a resume: exactly what the sample cache assumes. Greedy decoding equals
  ``generate``.

Used by :func:`grpo_ext.evaluation.sampling.sample`, which falls back to ``generate`` where this cannot run
(:class:`ContinuousUnsupported`: encoder-decoder models, caches that are not plain per-layer keys/values).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "ContinuousUnsupported",
    "choose_tokens",
    "continuous_sample",
    "counter_uniforms",
    "draw_from_cdf",
    "left_pad",
    "token_cdf",
]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _capacity(window: int) -> int:
    """Cache columns for rows of at most ``window`` tokens. Every column beyond the live windows is attended to
    (masked) by every slot, while each move back to the start copies the live windows once: a quarter of slack
    measured as fast as any other choice on the embedded task."""
    return window + max(8, window // 4)


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


def token_cdf(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Cumulative next-token probabilities ``[R, V]`` (float64: no drift over a 150k vocabulary) of
    softmax(logits / temperature) restricted to the top-p nucleus (transformers' own ``TopPLogitsWarper``, so the
    nucleus is the one ``generate`` keeps)."""
    scores = logits.float() / temperature
    if top_p < 1.0:
        from transformers.generation.logits_process import TopPLogitsWarper

        scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.softmax(scores, dim=-1).double().cumsum(-1)


def draw_from_cdf(cdf: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws: for each row of ``cdf [R, V]``, the first index whose cumulative probability exceeds
    ``u * total`` (never a token of probability 0), for ``uniforms [R]`` (one draw a row) or ``[R, K]`` (K a row)."""
    u = uniforms.to(cdf.dtype)
    one = u.ndim == 1
    target = (u.unsqueeze(1) if one else u) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
    return tokens.squeeze(1) if one else tokens


def choose_tokens(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row of ``logits [R, V]``: argmax when ``temperature == 0``, else a draw with ``uniforms [R]``."""
    if temperature == 0:
        return logits.argmax(-1)
    return draw_from_cdf(token_cdf(logits, temperature, top_p), uniforms)


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
        """Copy one row's keys/values into ``slots``, ending at the current column; mask out the rest."""
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

    def copy_row(self, source: int, target: int) -> None:
        """Slot ``target`` gets ``source``'s keys/values and mask (a row forked at the current column)."""
        end = self.length
        for layer in self.cache.layers:
            layer.buffer_keys[target, :, :end] = layer.buffer_keys[source, :, :end]
            layer.buffer_values[target, :, :end] = layer.buffer_values[source, :, :end]
        self.mask[target] = self.mask[source]

    def window(self, slot: int) -> list:
        """A copy of ``slot``'s own keys/values (its unmasked columns), to place again later."""
        end = self.length
        start = int(self.mask[slot, :end].argmax())
        return [
            (layer.buffer_keys[slot, :, start:end].clone(), layer.buffer_values[slot, :, start:end].clone())
            for layer in self.cache.layers
        ]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` of the batch (finished slots dropped once nothing waits for a slot)."""
        for layer in self.cache.layers:
            layer.buffer_keys, layer.buffer_values = layer.buffer_keys[rows], layer.buffer_values[rows]
            layer.view()
        self.mask = self.mask[rows]


@dataclass
class _Row:
    """A distinct prefix being decoded: the samples that drew the same tokens so far share it (and its forward)."""

    samples: list[int]  # sample ids riding on this row
    history: list[int]  # the new tokens drawn so far (the last one is the next input)
    position: int  # position id of that next input
    kv: list | None = None  # while waiting for a slot: its keys/values [(keys, values) per layer], [heads, len, dim]


class _Decoder:
    """The state of one :func:`continuous_sample` call: slots, their rows, the waiting rows, the samples' results."""

    def __init__(
        self, model, prompt_ids, seeds, *, max_new_tokens, temperature, top_p, slots, prefill_batch, eos_ids, pad_id
    ):
        if getattr(model.config, "is_encoder_decoder", False):
            raise ContinuousUnsupported("encoder-decoder model")
        if getattr(getattr(model, "generation_config", None), "cache_implementation", None) is not None:
            raise ContinuousUnsupported("the model's generation config asks for its own cache implementation")
        for name in ("past_key_values", "position_ids", "attention_mask"):
            if not _forward_accepts(model, name):
                raise ContinuousUnsupported(f"the model's forward takes no {name}")
        self.model, self.prompt_ids = model, prompt_ids
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.prefill_batch, self.eos, self.pad_id = prefill_batch, frozenset(eos_ids), pad_id
        self.keep_logits = {"logits_to_keep": 1} if _forward_accepts(model, "logits_to_keep") else {}
        self.device = next(model.parameters()).device
        # samples: id q = offset[j] + i for sample i of prompt j
        self.offset = np.cumsum([0] + [len(s) for s in seeds])
        self.sample_prompt = np.repeat(np.arange(len(seeds)), [len(s) for s in seeds])
        self.seed = np.array([x for s in seeds for x in s], dtype=np.uint64)
        self.results: list[list | None] = [[None] * len(s) for s in seeds]
        self.left = [len(s) for s in seeds]
        self.next_prompt = 0
        self.waiting_forks: deque[_Row] = deque()  # rows split off a live row: admitted first (their prompt is open)
        self.waiting_new: deque[_Row] = deque()  # first rows of freshly prefilled prompts
        self.rows: list[_Row | None] = [None] * slots
        self.step_input = torch.full((slots,), pad_id, dtype=torch.long, device=self.device)
        self.position = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.cache: _SlotCache | None = None

    # ---- samples --------------------------------------------------------------------------------------------------

    def draw(self, logits: torch.Tensor, groups: list[list[int]], counters: list[int]) -> list[list[int]]:
        """For each row of ``logits``, one token per sample of ``groups[row]`` (drawn with the sample's own uniform
        at its ``counters[row]``-th token)."""
        if self.temperature == 0:
            best = logits.argmax(-1).tolist()
            return [[best[r]] * len(g) for r, g in enumerate(groups)]
        cdf = token_cdf(logits, self.temperature, self.top_p)
        sizes = [len(g) for g in groups]
        ids = np.fromiter((q for g in groups for q in g), dtype=np.int64)
        counts = np.repeat(np.array(counters, dtype=np.uint64), sizes)
        # a row's samples side by side ([rows, largest group], padded): the row's CDF is searched, never copied
        used = torch.arange(max(sizes)) < torch.tensor(sizes).unsqueeze(1)
        uniforms = torch.zeros(used.shape, dtype=torch.float64)
        uniforms[used] = torch.from_numpy(counter_uniforms(self.seed[ids], counts))
        flat = draw_from_cdf(cdf, uniforms.to(cdf.device))[used.to(cdf.device)].tolist()
        out, k = [], 0
        for g in groups:
            out.append(flat[k : k + len(g)])
            k += len(g)
        return out

    def branch(self, row: _Row, tokens: list[int]) -> Iterator:
        """Split ``row``'s samples by the token each drew: finished samples yield their prompt when it completes;
        returns (via StopIteration) ``[(token, samples)]`` of those that go on, largest group first."""
        going: dict[int, list[int]] = {}
        for q, token in zip(row.samples, tokens, strict=True):
            if token in self.eos or len(row.history) + 1 >= self.max_new_tokens:
                yield from self.finish(q, [*row.history, token])
            else:
                going.setdefault(token, []).append(q)
        return sorted(going.items(), key=lambda item: -len(item[1]))

    def finish(self, q: int, tokens: list[int]) -> Iterator[tuple[int, list[list[int]]]]:
        j = int(self.sample_prompt[q])
        self.results[j][q - self.offset[j]] = tokens
        self.left[j] -= 1
        if self.left[j] == 0:
            yield j, self.results[j]
            self.results[j] = None  # handed over

    # ---- prompts in -----------------------------------------------------------------------------------------------

    def prefill_more(self) -> Iterator:
        """Prefill the next prompts; their samples draw first tokens from one forward and group by token."""
        chunk = list(range(self.next_prompt, min(self.next_prompt + self.prefill_batch, len(self.prompt_ids))))
        self.next_prompt = chunk[-1] + 1
        chunk = [j for j in chunk if self.left[j]]
        if not chunk:
            return
        kv, logits = _prefill(self.model, [self.prompt_ids[j] for j in chunk], self.pad_id, self.keep_logits)
        if self.cache is None:
            window = max(len(ids) for ids in self.prompt_ids) + self.max_new_tokens  # most columns a row needs
            self.cache = _SlotCache(kv[0], len(self.rows), _capacity(window), self.device)
        groups = [list(range(self.offset[j], self.offset[j + 1])) for j in chunk]
        for row, (j, tokens) in enumerate(zip(chunk, self.draw(logits, groups, [0] * len(chunk)), strict=True)):
            start = _Row(samples=groups[row], history=[], position=len(self.prompt_ids[j]))
            going = yield from self.branch(start, tokens)
            for token, samples in going:
                self.waiting_new.append(_Row(samples, [token], start.position, kv[row]))

    def admit(self) -> None:
        """Give free slots to waiting rows (forks first), copying each one's keys/values before the current column."""
        free = [s for s, row in enumerate(self.rows) if row is None]
        chosen = []
        while free and (self.waiting_forks or self.waiting_new):
            chosen.append((free.pop(0), (self.waiting_forks or self.waiting_new).popleft()))
        if not chosen:
            return
        longest = max(row.kv[0][0].shape[-2] for _, row in chosen)
        if self.cache.length < longest:  # not enough columns before the current one: make room
            self.compact(room_before=longest)
        by_kv: dict[int, list] = {}
        for slot, row in chosen:
            by_kv.setdefault(id(row.kv), [row.kv, []])[1].append(slot)
            self.step_input[slot], self.position[slot] = row.history[-1], row.position
            row.kv, self.rows[slot] = None, row
        for kv, slots in by_kv.values():
            self.cache.place(torch.tensor(slots, device=self.device), kv)

    # ---- slots ----------------------------------------------------------------------------------------------------

    def live(self) -> list[int]:
        return [s for s, row in enumerate(self.rows) if row is not None]

    def compact(self, room_before: int = 0) -> None:
        live, keep = self.live(), 0
        if live:  # the widest live window: from its slot's first unmasked column to the current one
            keep = self.cache.length - int(self.cache.mask[live, : self.cache.length].argmax(-1).min())
        self.cache.compact(keep, room_before)

    def shrink(self, live: list[int]) -> None:
        """Drop free slots from the batch (nothing is waiting for them any more)."""
        index = torch.tensor(live, device=self.device)
        self.cache.select(index)
        self.rows = [self.rows[s] for s in live]
        self.step_input, self.position = self.step_input[index], self.position[index]

    def fork(self, source: int, row: _Row) -> None:
        """A new row that shares ``source``'s keys/values: into a free slot at once, else it waits with a copy."""
        free = [s for s, r in enumerate(self.rows) if r is None]
        if free:
            self.cache.copy_row(source, free[0])
            self.rows[free[0]] = row
            self.step_input[free[0]], self.position[free[0]] = row.history[-1], row.position
        else:
            row.kv = self.cache.window(source)
            self.waiting_forks.append(row)

    def step(self) -> Iterator:
        """One token for every live row; samples branch; rows whose samples all ended free their slot."""
        live = self.live()
        column = self.cache.length
        self.cache.mask[:, column] = 1  # every slot sees its own new token (free slots too: no fully masked row)
        out = self.model(
            input_ids=self.step_input.unsqueeze(1),
            attention_mask=self.cache.mask[:, : column + 1],
            position_ids=self.position.unsqueeze(1),
            past_key_values=self.cache.cache,
            use_cache=True,
            return_dict=True,
            **self.keep_logits,
        )
        logits = out.logits[torch.tensor(live, device=self.device), -1, :]
        rows = [self.rows[s] for s in live]
        drawn = self.draw(logits, [row.samples for row in rows], [len(row.history) for row in rows])
        for slot, row, tokens in zip(live, rows, drawn, strict=True):
            going = yield from self.branch(row, tokens)
            if not going:
                self.rows[slot] = None
                continue
            (token, samples), *others = going
            for other, other_samples in others:  # share the row's keys/values up to here
                self.fork(slot, _Row(other_samples, [*row.history, other], row.position + 1))
            row.samples, row.history, row.position = samples, [*row.history, token], row.position + 1
            self.step_input[slot], self.position[slot] = token, row.position

    def run(self) -> Iterator[tuple[int, list[list[int]]]]:
        while True:
            free = sum(row is None for row in self.rows)
            while len(self.waiting_forks) + len(self.waiting_new) < free and self.next_prompt < len(self.prompt_ids):
                yield from self.prefill_more()
            self.admit()
            live = self.live()
            if not live:
                if self.next_prompt >= len(self.prompt_ids) and not self.waiting_new and not self.waiting_forks:
                    return
                continue
            nothing_waits = not (self.waiting_forks or self.waiting_new) and self.next_prompt >= len(self.prompt_ids)
            if nothing_waits and len(live) <= len(self.rows) // 2:
                self.shrink(live)
            if self.cache.length + 1 > self.cache.capacity:
                self.compact()
            yield from self.step()


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

    ``seeds[j]`` holds one 64-bit seed per sample of prompt ``j`` (so ``len(seeds[j])`` samples are drawn; a prompt
    with none yields nothing). A sample ends with an EOS token (kept in its ids) or after ``max_new_tokens``. At most
    ``slots`` rows (distinct prefixes) decode at once; ``prefill_batch`` prompts are prefilled a forward pass at a
    time. Raises :class:`ContinuousUnsupported` before yielding anything when the model cannot be decoded this way.
    """
    decoder = _Decoder(
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
    )
    yield from decoder.run()
