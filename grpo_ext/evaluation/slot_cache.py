"""The KV cache of the continuous sampler (:mod:`grpo_ext.evaluation.continuous`): prompts prefilled into per-prompt
keys/values, and one cache that every decoding slot shares.

All slots write the new token at the same cache column. A row that takes a slot later has its keys/values copied
into the columns just before it and everything older masked out: the left-padding rule of ``generate`` (positions
count only the row's own tokens), so a slot's attention is the same as if its row ran alone. When the columns run
out, the live windows are moved back to the start (:meth:`SlotCache.compact`).

transformers is imported inside the functions: importing the sampler (``grpo_ext.evaluation.sampling``) must not
import it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["ContinuousUnsupported", "SlotCache", "left_pad", "prefill"]


class ContinuousUnsupported(Exception):
    """The model or its cache does not allow slot-wise decoding: use ``generate``."""


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token lists padded on the left to the longest (as ``generate`` wants)."""
    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
    return input_ids, attention_mask


def prefill(model, prompt_ids: Sequence[Sequence[int]], pad_id: int, keep_logits: dict) -> tuple[list, torch.Tensor]:
    """One left-padded forward over whole prompts: ``([per prompt: [(keys, values) per layer]], last logits [B, V])``.

    Keys/values are sliced to each prompt's own tokens (``[heads, length, head_dim]``), ready to copy into slots.
    ``keep_logits`` is ``{"logits_to_keep": 1}`` where the model takes it (only the last position is needed), else
    ``{}``. Raises :class:`ContinuousUnsupported` when the cache the model returns cannot be copied slot-wise.
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


class SlotCache:
    """The shared KV cache of all slots, the attention mask saying which columns each slot sees, and its moves.

    ``prompt_kv`` (one prompt's ``[(keys, values) per layer]``) gives the layers' shapes and dtype; ``window`` is
    the most columns a row needs (longest prompt + ``max_new_tokens``).
    """

    def __init__(self, prompt_kv: list, slots: int, window: int, device):
        from transformers.cache_utils import Cache

        # Every column beyond the live windows is attended to (masked) by every slot, while each move back to the
        # start copies the live windows once: a quarter of slack measured as fast as any other choice on the
        # embedded task.
        self.capacity = window + max(8, window // 4)
        layer_class = _slot_layer_class()
        layers = []
        for keys, _ in prompt_kv:  # zeros, not empty: masked columns must hold finite numbers (0 * NaN = NaN)
            shape = (slots, keys.shape[0], self.capacity, keys.shape[-1])
            layers.append(layer_class(keys.new_zeros(shape), keys.new_zeros(shape)))
        self.cache = Cache(layers=layers)
        self.mask = torch.zeros((slots, self.capacity), dtype=torch.long, device=device)

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
