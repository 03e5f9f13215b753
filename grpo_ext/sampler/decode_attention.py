"""The continuous sampler's attention for one-token decode steps of a model on a CPU, and its shared prompt prefix.

A decode step attends one new query a row to every key/value column of its slot, so on a CPU it is bound by reading
the cache. Measured on SmolLM2-135M (3 key/value heads of 64, one thread, AMD EPYC with ``avx512_bf16``), 128 slots x
210 columns a layer: PyTorch's CPU ``scaled_dot_product_attention`` in bf16 ~6-7 ms, two plain bf16 matmuls with a
float32 softmax ~3 ms on contiguous keys/values but ~11 ms on the slot cache's strided view of its buffers (the first
``length`` of ``capacity`` columns: CPU bf16 batched matmuls fall off their fast path), and ``eager`` copies the
keys/values ``num_key_value_groups`` times first. :func:`decode_attention_forward` is ``eager``'s arithmetic (bf16
``QK^T`` scaled, the mask, softmax in float32, ``PV`` in bf16) on the query heads packed by key/value head (no copy),
over the whole contiguous buffer with the unused columns masked. Steps with more than one query (prefill) go to
``sdpa``.

**A shared prefix** (cascade attention): where every prompt of a call starts with the same tokens (an instruction and
worked examples: ~170 of the ~190 prompt tokens of the real-model study's prompts), the sampler prefills them once and
keeps their keys/values apart (``[heads, P, dim]`` a layer) instead of in every slot; each step then reads them once
for all rows' queries (one ``[KV, rows x groups, dim] @ [KV, dim, P]`` product) and the slots hold each row's own
columns only, with one softmax over both. In float32 its samples are those of ``sdpa``
(tests/sampler/test_decode_attention.py); in bf16 its error against a float32 attention is eager's (about twice sdpa's
kernel's, 0.4% vs 0.2% of the output's mean magnitude), below the rest of a bf16 forward's: the next-token
distributions of bf16 and float32 models differ as much with either (total variation ~0.005).

:func:`cpu_decode_attention` switches a model to it for the duration of one forward pass (restored after, so the
trainer's forward and backward passes never see it), and only where it is measured ahead: a CPU model whose attention
is ``sdpa`` or ``eager``. In bf16 / fp16 for the kernel itself (above); in float32 for the shared prefix it makes
possible: a float32 CPU model's time is in its matmuls (the kernel itself is not ahead there: one profile of the
start's decode steps, 17.0 CPU s on sdpa against 18.4 on the kernel with the prefix), and a prompt's
prefill costs about as much as its samples, so prefilling the 75 tokens of SmolLM2's chat template once instead of in
every ~108-token prompt was 1.38x / 1.35x the samples a CPU second on the SFT study's start at n = 4 / 16
(``benchmarks/fp32_prefix.py``), the samples the same but for float rounding at a draw's edge.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["NAME", "cpu_decode_attention", "decode_attention_forward", "uses_decode_attention"]

#: The name it is registered under in transformers' attention and mask interfaces.
NAME = "grpo_ext_cpu_decode"
_registered = False
#: While a forward runs under cpu_decode_attention(prefix=...): each layer's shared-prefix (keys, values).
_prefix: list | None = None
#: While a forward runs under cpu_decode_attention: the additive masks built for it (its layers share one).
_masks: dict | None = None


def decode_attention_forward(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """transformers' attention-function signature: ``query [B, H, Q, D]``, ``key``/``value [B, KV, L, D]``; returns
    ``(output [B, Q, H, D], None)``. One query a row (``Q == 1``) is computed here; anything else (prefill, dropout,
    soft-capping, attention sinks, a position bias) by ``sdpa``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    special = any(kwargs.get(name) is not None for name in ("softcap", "s_aux", "sinks", "position_bias"))
    if query.shape[2] != 1 or dropout or special or key.shape[-1] != value.shape[-1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads, columns = key.shape[1], key.shape[2]
    if scaling is None:
        scaling = dim**-0.5
    # The slot cache hands over the first `columns` columns of [B, KV, capacity, D] buffers: a strided view, which
    # CPU bf16 batched matmuls read several times slower than a contiguous tensor. The whole buffers are contiguous:
    # attend over them, the columns past `columns` masked out (finite numbers there: zeros or old keys/values).
    key_all, value_all = _whole_buffer(key), _whole_buffer(value)
    if key_all is None or value_all is None or key_all.shape[2] != value_all.shape[2]:
        key_all, value_all = key, value
    # head h attends with key/value head h // (heads / kv_heads), as repeat_kv lays them out
    rep = heads // kv_heads
    q = query.reshape(batch, kv_heads, rep, dim)
    scores = torch.matmul(q, key_all.transpose(2, 3))  # [B, KV, H / KV, capacity]
    prefix = _prefix[module.layer_idx] if _prefix is not None else None
    shared = 0
    if prefix is not None:
        # A prefix every row shares (cascade attention): its keys/values [KV, P, D] are read once for all the rows'
        # queries ([KV, B * H / KV, D] @ [KV, D, P]), then one softmax over the prefix's and the row's own columns.
        prefix_keys, prefix_values = prefix
        shared = prefix_keys.shape[1]
        grouped = q.permute(1, 0, 2, 3).reshape(kv_heads, batch * rep, dim)
        prefix_scores = torch.matmul(grouped, prefix_keys.transpose(1, 2))  # [KV, B * H / KV, P]
        prefix_scores = prefix_scores.reshape(kv_heads, batch, rep, shared).permute(1, 0, 2, 3)
        scores = torch.cat([prefix_scores, scores], dim=-1)
    mask = _additive_mask(attention_mask, batch, columns, key_all.shape[2], shared, key_all.device)
    # mask + scaling * scores in float32, one op (eager scales in the model's dtype, then adds the mask)
    logits = torch.add(mask, scores, alpha=scaling) if mask is not None else scores.float().mul_(scaling)
    probs = torch.softmax(logits, dim=-1).to(value.dtype)
    if prefix is None:
        out = torch.matmul(probs, value_all)  # [B, KV, H / KV, D]
    else:
        prefix_probs = probs[..., :shared].permute(1, 0, 2, 3).reshape(kv_heads, batch * rep, shared)
        out = torch.matmul(probs[..., shared:].contiguous(), value_all)  # [B, KV, H / KV, D]
        out += torch.matmul(prefix_probs, prefix_values).reshape(kv_heads, batch, rep, dim).permute(1, 0, 2, 3)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2), None


def _additive_mask(
    attention_mask, batch: int, columns: int, capacity: int, shared: int, device: torch.device
) -> torch.Tensor | None:
    """The step's mask as float32 ``[B, 1, 1, shared + capacity]``: 0 where a row attends (every prefix column, its
    own visible columns), -inf elsewhere (hidden columns, the buffer's unused ones). Every layer of a forward gets the
    same mask object: it is built once a forward (cached while :func:`cpu_decode_attention` runs it)."""
    if attention_mask is None and capacity == columns:
        return None
    key = (id(attention_mask), batch, columns, capacity, shared, device)
    if _masks is not None and key in _masks:
        return _masks[key]
    mask = torch.zeros((batch, 1, 1, shared + capacity), dtype=torch.float32, device=device)
    own = mask[..., shared : shared + columns]
    if attention_mask is not None:
        given = attention_mask[:, :, :, :columns]  # [B, 1, 1, columns]: one query, every head
        if given.dtype == torch.bool:
            own.masked_fill_(~given, float("-inf"))
        else:
            own += given
    mask[..., shared + columns :] = float("-inf")
    if _masks is not None:
        _masks[key] = mask
    return mask


def _whole_buffer(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` (``[B, KV, L, D]``) if contiguous; else, when it is the first ``L`` columns of a contiguous
    ``[B, KV, C, D]`` buffer (the slot cache's layout), that whole buffer; else None."""
    if t.is_contiguous():
        return t
    batch, heads, _, dim = t.shape
    s0, s1, s2, s3 = t.stride()
    if s3 != 1 or s2 != dim or s1 % dim or s0 != heads * s1:
        return None
    capacity = s1 // dim
    if t.storage_offset() + batch * s0 > t.untyped_storage().nbytes() // t.element_size():
        return None
    return t.as_strided((batch, heads, capacity, dim), (s0, s1, s2, s3))


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, decode_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the masks sdpa gets: boolean, padding + causal
    _registered = True


def uses_decode_attention(model) -> bool:
    """Whether :func:`cpu_decode_attention` switches ``model``: its weights on a CPU in bf16 / fp16 / float32 and its
    attention ``sdpa`` (transformers' default) or ``eager`` (whose arithmetic it is, without the key/value copies)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    try:
        weight = next(model.parameters())
    except StopIteration:
        return False
    # a 4-bit base keeps uint8 weights: its compute dtype is not known here, so it keeps sdpa
    return weight.device.type == "cpu" and weight.dtype in (torch.bfloat16, torch.float16, torch.float32)


@contextlib.contextmanager
def cpu_decode_attention(model, enabled: bool = True, prefix: list | None = None):
    """Within the block, ``model`` attends with :func:`decode_attention_forward` (its config's attention
    implementation switched and restored after); a no-op when ``enabled`` is False.

    ``prefix``: ``[(keys, values) per layer]`` (``[heads, P, head_dim]``) of ``P`` columns that come before every row's
    own keys/values (the cache holds the rows' own columns only): every one-query step attends to them too."""
    global _prefix, _masks
    if not enabled:
        yield
        return
    _register()
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = NAME
    _prefix, _masks = prefix, {}
    try:
        yield
    finally:
        config._attn_implementation = before
        _prefix = _masks = None
