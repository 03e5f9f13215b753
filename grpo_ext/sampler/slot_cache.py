"""The KV cache of the continuous sampler (:mod:`grpo_ext.sampler.continuous`): prompts prefilled into per-prompt
keys/values, and one cache that every decoding slot shares.

All slots write the new token at the same cache column. A row that takes a slot later has its keys/values copied
into the columns just before it and everything older masked out: the left-padding rule of ``generate`` (positions
count only the row's own tokens), so a slot's attention is the same as if its row ran alone. When the columns run
out, the live windows are moved back to the start (:meth:`SlotCache.compact`).

Two layer kinds, chosen per cache (``static``): the eager ``SlotLayer`` hands attention the columns in use (a view
whose width grows each step), the static ``StaticSlotLayer`` hands it the whole buffer and writes the new column with
``index_copy_`` at a device tensor, as transformers' ``StaticLayer`` does, so every decode step has the same shapes
and can be compiled / captured (:mod:`grpo_ext.sampler.static_step`). The columns beyond the current one are
masked and hold zeros, so the two attend to the same keys/values.

transformers is imported inside the functions: importing the sampler (``grpo_ext.sampler.sampling``) must not
import it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

__all__ = [
    "ContinuousUnsupported",
    "SlotCache",
    "free_memory",
    "left_pad",
    "prefill",
    "shared_prefix_length",
    "slots_within",
]


class ContinuousUnsupported(Exception):
    """The model or its cache does not allow slot-wise decoding: use ``generate``."""


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token lists padded on the left to the longest (as ``generate`` wants)."""
    width = max(len(ids) for ids in prompt_ids)
    # on the host (filled row by row); callers copy them to the model's device
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long, device="cpu")
    attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long, device="cpu")
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long, device="cpu")
        attention_mask[row, width - len(ids) :] = 1
    return input_ids, attention_mask


def last_position_only(keep_logits: dict, width: int, device) -> dict:
    """``keep_logits`` for a forward over ``width`` positions whose last one alone is scored: ``logits_to_keep`` as
    the index tensor ``[width - 1]`` (transformers' documented 1-D form) instead of the integer 1.

    Why: with the integer the model hands its head ``hidden[:, -1:, :]``, a strided view of ``[B, width, d]``, and
    ``torch.matmul`` (2.13) folds a strided 3-D input into one ``mm`` only when the weight requires a gradient. A
    frozen head (every PEFT model: the base is frozen; the trainer's policy) is instead expanded to ``[B, d, V]`` and
    copied for a ``bmm``: measured on SmolLM2-135M in bf16 (one thread), 1.4 s for 16 prompts against 7 ms folded,
    the larger part of a LoRA adapter's slowdown against its base (``benchmarks/lora_sampling.py``, side ``before``).
    An index gathers a contiguous ``[B, 1, d]``: the same numbers, one ``mm``. A one-position forward (a decode step)
    has no strided view and keeps the integer.
    """
    if keep_logits.get("logits_to_keep") != 1 or width == 1:
        return keep_logits
    return {**keep_logits, "logits_to_keep": torch.tensor([width - 1], device=device)}


def prefill(
    model,
    prompt_ids: Sequence[Sequence[int]],
    pad_id: int,
    keep_logits: dict,
    prefix: list | None = None,
    cache_keyword: str = "cache",
) -> tuple[list, torch.Tensor]:
    """One left-padded forward over whole prompts: ``([per prompt: [(keys, values) per layer]], last logits [B, V])``.

    Keys/values are sliced to each prompt's own tokens (``[heads, length, head_dim]``), ready to copy into slots.
    ``keep_logits`` is ``{"logits_to_keep": 1}`` where the model takes it (only the last position is needed), else
    ``{}``. Raises :class:`ContinuousUnsupported` when the cache the model returns cannot be copied slot-wise.

    ``prefix``: the keys/values (``[(keys, values) per layer]``, ``[heads, P, head_dim]``) of ``P`` tokens that come
    before every one of ``prompt_ids`` (a prompt prefix they all share, prefilled once): the prompts' tokens are
    then the ones after it, at positions ``P, P + 1, ...``, attending to the prefix through the forward's cache (the
    model's ``cache_keyword`` argument); the keys/values returned are still the prompts' own tokens only.
    """
    from transformers.cache_utils import DynamicCache, DynamicLayer

    device = next(model.parameters()).device
    input_ids, attention_mask = left_pad(prompt_ids, pad_id)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_(min=0)  # generate's rule for left padding
    past = {}
    if prefix is not None:
        rows, shared = len(prompt_ids), prefix[0][0].shape[-2]
        position_ids += shared
        prefix_mask = torch.ones((rows, shared), dtype=attention_mask.dtype, device=attention_mask.device)
        attention_mask = torch.cat([prefix_mask, attention_mask], dim=1)
        layers = [(k.unsqueeze(0).expand(rows, -1, -1, -1), v.unsqueeze(0).expand(rows, -1, -1, -1)) for k, v in prefix]
        past = {cache_keyword: DynamicCache(ddp_cache_data=layers)}
    out = model(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        use_cache=True,
        return_dict=True,
        **past,
        **last_position_only(keep_logits, input_ids.shape[1], device),
    )
    cache = getattr(out, "cache", None)  # transformers >= 5.24; ``past_key_values`` before
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if not isinstance(cache, DynamicCache) or not cache.layers:
        raise ContinuousUnsupported(f"the model returned a {type(cache).__name__}, not a DynamicCache")
    for layer in cache.layers:  # sliding-window, quantised or recurrent layers cannot be copied slot-wise
        if type(layer) is not DynamicLayer or layer.keys is None or layer.keys.ndim != 4:
            raise ContinuousUnsupported(f"cache layer {type(layer).__name__} is not plain keys/values")
    width = cache.layers[0].keys.shape[-2]  # the prefix's columns and the padded prompts'
    per_prompt = [
        [(layer.keys[row, :, width - len(ids) :], layer.values[row, :, width - len(ids) :]) for layer in cache.layers]
        for row, ids in enumerate(prompt_ids)
    ]
    return per_prompt, out.logits[:, -1, :].float()


def shared_prefix_length(prompt_ids: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every prompt has in common, at most the shortest prompt's length - 1 (each prompt keeps
    a token of its own: its last position's logits are its first draw)."""
    first, shortest = prompt_ids[0], min(len(ids) for ids in prompt_ids)
    length = shortest - 1
    for ids in prompt_ids[1:]:
        common = 0
        for a, b in zip(first[:length], ids[:length], strict=False):
            if a != b:
                break
            common += 1
        length = common
        if not length:
            break
    return max(length, 0)


def _slot_layer_class():
    """The cache layer class, built on first use (it subclasses transformers' ``DynamicLayer``, imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """One layer's keys/values for every slot: ``[slots, heads, capacity, head_dim]`` buffers of which columns
        ``[0, length)`` are in use; ``update`` writes the step's column in place (no ``torch.cat`` of the cache)."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor):
            super().__init__()
            # what DynamicLayer.lazy_initialization would set (get_seq_length reads is_initialized)
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self.buffer_keys, self.buffer_values, self.length = keys, values, 0
            self.view()

        def view(self) -> None:
            """Point ``keys``/``values`` (what attention reads) at the columns in use."""
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


@functools.cache
def _static_slot_layer_class():
    """The fixed-shape layer class, built on first use (it subclasses transformers' ``StaticLayer``), once: a
    compiled step guards on the layers' type, so a new class every call would compile again every call."""
    from transformers.cache_utils import StaticLayer

    class StaticSlotLayer(StaticLayer):
        """One layer's keys/values for every slot, ``[slots, heads, capacity, head_dim]``, all handed to attention.

        ``column`` (a 0-d long tensor on the device, shared by every layer of the cache) is where the step's token is
        written: ``get_seq_length`` returns it, so transformers' mask code offsets the causal mask by it (the query
        is at ``column``) and, the cache being compileable, builds a ``[slots, 1, 1, capacity]`` mask without the
        ``is_causal`` shortcut, as for a ``StaticCache``. Nothing here reads a Python number that changes between
        steps: a compiled step is traced once. ``length`` mirrors ``column`` on the host for the cache's moves."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, column: torch.Tensor):
            super().__init__(max_cache_len=keys.shape[-2])
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self.batch_size, self.num_heads = keys.shape[:2]
            self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
            self.cumulative_length = column
            self.buffer_keys, self.buffer_values, self.length = keys, values, 0
            self.view()

        def view(self) -> None:
            """Attention reads whole buffers; each (new) buffer gets a fixed address for CUDA graphs."""
            self.keys, self.values = self.buffer_keys, self.buffer_values
            self.batch_size = self.keys.shape[0]
            for tensor in (self.keys, self.values, self.cumulative_length):
                torch._dynamo.mark_static_address(tensor)

        def update(self, key_states, value_states, *args, **kwargs):
            # the column advances outside the step (SlotCache.advance), once for all layers
            position = self.cumulative_length.reshape(1)
            self.keys.index_copy_(2, position, key_states)
            self.values.index_copy_(2, position, value_states)
            return self.keys, self.values

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.keys.shape[-2], 0  # a shape, not an attribute: symbolic if the compiler makes it dynamic

    return StaticSlotLayer


def slot_capacity(window: int, static: bool) -> int:
    """The columns of a cache whose rows need at most ``window`` columns each."""
    # Every column beyond the live windows is attended to (masked) by every slot, while each move back to the start
    # copies the live windows once: a quarter of slack measured as fast as any other choice on the embedded task.
    capacity = window + max(8, window // 4)
    if static:  # a compiled step is specialised to its shapes: calls with similar windows share one capacity
        capacity = -(-capacity // 64) * 64
    return capacity


def slots_within(prompt_kv: list, window: int, budget_bytes: int | None, static: bool = False) -> int | None:
    """How many slots' keys/values fit in ``budget_bytes`` (at least one; None: no budget).

    ``prompt_kv`` is one prompt's ``[(keys, values) per layer]`` (``[heads, length, head_dim]``): the layers'
    shapes and dtype, as :class:`SlotCache` allocates them. A slot costs keys + values of every layer over the
    cache's whole capacity: on SmolLM2-135M (30 layers, 3 KV heads of 64) ~15 MB in fp32 for a 260-token window, so
    the 512 slots of 8 prompts x 64 samples would take 8 GB where the embedded model's take 60 MB."""
    if budget_bytes is None:
        return None
    capacity = slot_capacity(window, static)
    column = sum(t.shape[0] * t.shape[-1] * t.element_size() for layer in prompt_kv for t in layer)  # all layers
    per_slot = column * capacity
    return max(1, int(budget_bytes // per_slot))


def free_memory(device) -> int | None:
    """Bytes free on ``device`` now: CUDA's free memory, the host's available memory for the CPU; None elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        import psutil  # accelerate's dependency

        return psutil.virtual_memory().available
    return None


class SlotCache:
    """The shared KV cache of all slots, the attention mask saying which columns each slot sees, and its moves.

    ``prompt_kv`` (one prompt's ``[(keys, values) per layer]``) gives the layers' shapes and dtype; ``window`` is
    the most columns a row needs (longest prompt + ``max_new_tokens``). ``static``: fixed-shape layers (see the
    module docstring); the caller then passes the whole :attr:`mask` and calls :meth:`advance` after each step.
    """

    def __init__(self, prompt_kv: list, slots: int, window: int, device, static: bool = False):
        from transformers.cache_utils import Cache

        self.capacity = slot_capacity(window, static)
        self.static = static
        self.column = torch.zeros((), dtype=torch.long, device=device)  # the device copy of `length` (static)
        layer_class = _static_slot_layer_class() if static else _slot_layer_class()
        extra = (self.column,) if static else ()
        layers = []
        for keys, _ in prompt_kv:  # zeros, not empty: masked columns must hold finite numbers (0 * NaN = NaN)
            shape = (slots, keys.shape[0], self.capacity, keys.shape[-1])
            layers.append(layer_class(keys.new_zeros(shape), keys.new_zeros(shape), *extra))
        self.cache = Cache(layers=layers)
        self.mask = torch.zeros((slots, self.capacity), dtype=torch.long, device=device)
        self._mark_mask()

    def _mark_mask(self) -> None:
        if self.static:  # a compiled step reads it at a fixed address
            torch._dynamo.mark_static_address(self.mask)

    def advance(self) -> None:
        """After a static step: the column just written is in use (an eager layer counts it in its ``update``)."""
        for layer in self.cache.layers:
            layer.length += 1
        self.column.add_(1)

    @property
    def length(self) -> int:
        """The columns in use; the next step writes column ``length``."""
        return self.cache.layers[0].length

    def place(self, slots: torch.Tensor, kv: list) -> None:
        """Copy one row's keys/values into ``slots``, ending at the current column; mask out the rest."""
        length, end = kv[0][0].shape[-2], self.length
        for layer, (keys, values) in zip(self.cache.layers, kv, strict=True):
            layer.buffer_keys[slots, :, end - length : end] = keys
            layer.buffer_values[slots, :, end - length : end] = values
        self.mask[slots] = 0
        self.mask[slots, end - length : end] = 1

    def compact(self, live: list[int], room_before: int = 0) -> None:
        """Move the columns the ``live`` slots see (from the earliest first unmasked column of any of them to the
        current one) back to end at column ``max(their width, room_before)``: frees columns after them, and leaves
        ``room_before`` columns before the current one for a row to be placed."""
        end, keep = self.length, 0
        if live:
            keep = end - int(self.mask[live, :end].argmax(-1).min())
        new_end = max(keep, room_before)
        for layer in self.cache.layers:
            for buffer in (layer.buffer_keys, layer.buffer_values):
                # clone: source and target columns overlap when the move is shorter than the width
                buffer[:, :, new_end - keep : new_end] = buffer[:, :, end - keep : end].clone()
            layer.length = new_end
            layer.view()
        if self.static:
            self.column.fill_(new_end)
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
        self._mark_mask()
