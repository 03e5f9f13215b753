"""Token draws of the continuous sampler (:mod:`grpo_ext.sampler.continuous`), as pure functions.

Sample ``i`` of a prompt draws its ``t``-th token by inverse CDF with the uniform :func:`counter_uniforms`
``(seed_i, t)``: a counter-based RNG (as in JAX or Philox), so the number depends on the sample's own seed and
position only, never on a generator's state. That is what lets a sample be the same whatever the batch size, the
other prompts, the row it shares with other samples, or a resume of the sample cache.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["choose_tokens", "counter_uniforms", "draw_from_cdf", "draw_tokens", "token_cdf"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio: splitmix64's increment between counters


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
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53  # top 53 bits: exact in a float64, so < 1


def token_cdf(
    logits: torch.Tensor, temperature: float, top_p: float, top_k: int = 0, min_p: float | None = None
) -> torch.Tensor:
    """Cumulative next-token probabilities ``[R, V]`` (float64: no drift over a 150k vocabulary) of
    softmax(logits / temperature) restricted by ``top_k`` (0: off), the ``top_p`` nucleus and ``min_p`` (None: off),
    in that order, with transformers' own warpers: the tokens ``generate`` keeps."""
    # one float32 copy divided in place (logits.float() / t allocates twice for bf16 logits); the same numbers
    scores = logits.to(torch.float32, copy=True).div_(temperature)
    if top_k or top_p < 1.0 or min_p is not None:
        # imported here: importing the sampler must not import transformers (sampling.py stays light)
        from transformers.generation.logits_process import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        if top_k:
            scores = TopKLogitsWarper(top_k)(None, scores)
        if top_p < 1.0:
            scores = TopPLogitsWarper(top_p)(None, scores)
        if min_p is not None:
            scores = MinPLogitsWarper(min_p)(None, scores)
    # cumsum in float64 straight from the float32 probabilities: the numbers of .double().cumsum(-1), one pass less
    return torch.softmax(scores, dim=-1).cumsum(-1, dtype=torch.float64)


def draw_from_cdf(cdf: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws: for each row of ``cdf [R, V]``, the first index whose cumulative probability exceeds
    ``u * total`` (never a token of probability 0), for ``uniforms [R]`` (one draw a row) or ``[R, K]`` (K a row)."""
    u = uniforms.to(cdf.dtype)
    one = u.ndim == 1
    target = (u.unsqueeze(1) if one else u) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
    return tokens.squeeze(1) if one else tokens


def choose_tokens(
    logits: torch.Tensor,
    uniforms: torch.Tensor,
    temperature: float,
    top_p: float,
    top_k: int = 0,
    min_p: float | None = None,
) -> torch.Tensor:
    """One token per row of ``logits [R, V]``: argmax when ``temperature == 0``, else a draw with ``uniforms [R]``.

    The rule for one sample decoded alone (the reference tests/sampler/test_continuous.py checks the sampler against);
    :func:`draw_tokens` applies it to all the samples that share a row at once."""
    if temperature == 0:
        return logits.argmax(-1)
    return draw_from_cdf(token_cdf(logits, temperature, top_p, top_k, min_p), uniforms)


def draw_tokens(
    logits: torch.Tensor,
    seeds: np.ndarray,
    groups: list[list[int]],
    counters: list[int],
    temperature: float,
    top_p: float,
    top_k: int = 0,
    min_p: float | None = None,
) -> list[list[int]]:
    """For each row of ``logits [R, V]``, one token per sample of ``groups[row]`` (sample ids, indices into the
    ``uint64`` array ``seeds``), each drawn with the sample's own uniform at its ``counters[row]``-th token
    (``top_k`` / ``top_p`` / ``min_p`` as :func:`token_cdf` applies them).

    The samples of a row share its distribution, so the row's CDF is built once and searched with all their
    uniforms; greedy decoding gives every sample of a row its argmax."""
    if temperature == 0:
        best = logits.argmax(-1).tolist()
        return [[best[r]] * len(g) for r, g in enumerate(groups)]
    cdf = token_cdf(logits, temperature, top_p, top_k, min_p)
    sizes = [len(g) for g in groups]
    ids = np.fromiter((q for g in groups for q in g), dtype=np.int64)
    counts = np.repeat(np.array(counters, dtype=np.uint64), sizes)
    if len(ids) == len(groups):  # one sample a row (most rows, once samples diverge): one draw a row, no padding
        uniforms = torch.from_numpy(counter_uniforms(seeds[ids], counts)).to(cdf.device)
        return [[t] for t in draw_from_cdf(cdf, uniforms).tolist()]
    # a row's samples side by side ([rows, largest group], padded): the row's CDF is searched, never copied
    used = torch.arange(max(sizes), device="cpu") < torch.tensor(sizes, device="cpu").unsqueeze(1)  # host masks
    uniforms = torch.zeros(used.shape, dtype=torch.float64, device="cpu")
    uniforms[used] = torch.from_numpy(counter_uniforms(seeds[ids], counts))
    flat = draw_from_cdf(cdf, uniforms.to(cdf.device))[used.to(cdf.device)].tolist()
    out, k = [], 0
    for g in groups:
        out.append(flat[k : k + len(g)])
        k += len(g)
    return out
