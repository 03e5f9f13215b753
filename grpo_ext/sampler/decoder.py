"""The decode loop of the continuous sampler (:mod:`grpo_ext.sampler.continuous`): one :class:`Decoder` per call.

It owns the slots and the rows riding on them (a row is a distinct prefix shared by the samples that drew the same
tokens so far), admits waiting rows into free slots, forks a row when its samples' draws differ, shrinks the batch
once nothing waits, and picks the decode step (eager, the CPU decode attention, or the fixed-shape / compiled step)
and how PEFT LoRA layers compute in it (:class:`~grpo_ext.sampler.lora_sampling.LoraSampling`, switched on around
each forward).
Kept apart from :func:`~grpo_ext.sampler.continuous.continuous_sample` so that the entry point and its contract read
in one screen and the loop's state in another.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from grpo_ext.sampler.decode_attention import cpu_decode_attention, uses_decode_attention
from grpo_ext.sampler.lora_sampling import LoraSampling
from grpo_ext.sampler.slot_cache import (
    ContinuousUnsupported,
    SlotCache,
    free_memory,
    prefill,
    shared_prefix_length,
    slots_within,
)
from grpo_ext.sampler.static_step import StepInputs, compiled_forward, resolve_decode, static_shrink_plan
from grpo_ext.sampler.token_draws import draw_tokens

logger = logging.getLogger(__name__)

#: The share of the device's free memory (when decoding starts) that the slots' keys/values may take by default:
#: the rest is for the forward's activations, the logits and whatever else runs on the device.
KV_MEMORY_SHARE = 0.5


def _forward_accepts(model, name: str) -> bool:
    """Whether the model's forward takes the keyword ``name`` (checked once per call, before any decoding).

    Lives here, next to the checks that read it: tests patch ``decoder._forward_accepts`` to force the fallback."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the forward
    try:
        return name in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):  # builtins and some wrappers have no inspectable signature
        return False


#: The most samples in flight (of prompts prefilled and not finished) a slot. A prompt's samples share one row until
#: their draws differ, then fork into rows of their own; a fork that finds no free slot waits with a copy of its
#: keys/values. Prompts admitted while rows fit (one row each at first) put ~300 prompts of 64 samples in flight on
#: the SFT start (512 slots, fp32), and the waiting forks' copies took 12 GB. Measured on its test prompts (n = 64,
#: 96 prompts, 128 slots, one thread): 1,024 / 2,048 / 4,096 samples in flight and no bound gave 38.5 / 56.0 / 55.9 /
#: 59.3 samples a CPU second at a peak of 2.4 / 2.7 / 3.5 / 4.4 GB; the samples do not depend on it.
SAMPLES_PER_SLOT = 16

#: The fewest tokens a prompt prefix shared by every prompt of a call must have to be prefilled once and kept apart.
SHARED_PREFIX_MIN = 16


def _sliding(config) -> bool:
    """Whether some layer attends through a sliding window (its prefix columns are not all visible)."""
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return any("sliding" in str(kind) for kind in getattr(config, "layer_types", None) or ())
    return True


def _default_kv_budget(device) -> int | None:
    free = free_memory(device)
    return None if free is None else int(free * KV_MEMORY_SHARE)


@dataclass
class _Row:
    """A distinct prefix being decoded: the samples that drew the same tokens so far share it (and its forward)."""

    samples: list[int]  # sample ids riding on this row
    history: list[int]  # the new tokens drawn so far (the last one is the next input)
    position: int  # position id of that next input
    kv: list | None = None  # while waiting for a slot: its keys/values [(keys, values) per layer], [heads, len, dim]


class Decoder:
    """The state of one :func:`continuous_sample` call: slots, their rows, the waiting rows, the samples' results."""

    def __init__(
        self,
        model,
        prompt_ids,
        seeds,
        *,
        max_new_tokens,
        temperature,
        top_p,
        slots,
        prefill_batch,
        eos_ids,
        pad_id,
        decode="eager",
        compile_options=None,
        top_k=0,
        min_p=None,
        kv_budget=None,
        stop=None,
        lora="base_dtype",
    ):
        if getattr(model.config, "is_encoder_decoder", False):
            raise ContinuousUnsupported("encoder-decoder model")
        if getattr(getattr(model, "generation_config", None), "cache_implementation", None) is not None:
            raise ContinuousUnsupported("the model's generation config asks for its own cache implementation")
        # transformers 5.24 renamed the forward's ``past_key_values`` to ``cache`` (the old name is deprecated)
        self.cache_keyword = next((n for n in ("cache", "past_key_values") if _forward_accepts(model, n)), None)
        if self.cache_keyword is None:
            raise ContinuousUnsupported("the model's forward takes no cache (cache or past_key_values)")
        for name in ("position_ids", "attention_mask"):
            if not _forward_accepts(model, name):
                raise ContinuousUnsupported(f"the model's forward takes no {name}")
        self.model, self.prompt_ids = model, prompt_ids
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.filters = {"top_k": top_k, "min_p": min_p}  # off by default (the harness's sampling)
        self.prefill_batch, self.eos, self.pad_id = prefill_batch, frozenset(eos_ids), pad_id
        self.stop = stop  # None, or new token ids -> whether they now hold a stop string (stops.StopChecker)
        self.keep_logits = {"logits_to_keep": 1} if _forward_accepts(model, "logits_to_keep") else {}
        self.device = next(model.parameters()).device
        # samples: id q = offset[j] + i for sample i of prompt j
        self.offset = np.cumsum([0] + [len(s) for s in seeds])
        self.sample_prompt = np.repeat(np.arange(len(seeds)), [len(s) for s in seeds])
        self.seed = np.array([x for s in seeds for x in s], dtype=np.uint64)
        self.results: list[list | None] = [[None] * len(s) for s in seeds]
        self.left = [len(s) for s in seeds]
        self.next_prompt = 0
        self.in_flight = 0  # samples of the prefilled prompts not finished yet
        self.waiting_forks: deque[_Row] = deque()  # rows split off a live row: admitted first (their prompt is open)
        self.waiting_new: deque[_Row] = deque()  # first rows of freshly prefilled prompts
        self.decode = resolve_decode(decode, model)
        self.static = self.decode != "eager"
        # the eager step of a CPU model attends with decode_attention's kernel (bf16: 2x sdpa's; float32: the prefix)
        self.decode_attention = self.decode != "compiled" and uses_decode_attention(model)
        # A prompt prefix every prompt shares (an instruction, worked examples) is prefilled once and kept apart from
        # the slots, which hold each row's own columns; the decode attention reads it once a step for all the rows.
        self.shared = 0
        if self.decode_attention and not self.static and not _sliding(model.config):
            length = shared_prefix_length(prompt_ids)
            self.shared = length if length >= SHARED_PREFIX_MIN else 0
        self.prefix_kv: list | None = None  # [(keys, values) per layer] of the shared prefix, [heads, P, head_dim]
        self.kv_budget = kv_budget
        self._allocate_slots(slots)
        self.compiled = compiled_forward(compile_options) if self.decode == "compiled" else None
        # PEFT LoRA layers compute their product in the base's dtype (LoraSampling); a compiled step keeps PEFT's
        # forward: swapping a module's forward at every step would be a new graph for the compiler each time
        self.lora = LoraSampling(model, "peft" if self.decode == "compiled" else lora)
        self.compiled_once = False  # whether a compiled step has run (a failing first compilation falls back)
        self.cache: SlotCache | None = None  # built at the first prefill (it takes the layers' shapes)

    def _allocate_slots(self, slots: int) -> None:
        self.rows: list[_Row | None] = [None] * slots
        self.start_slots = slots
        if self.static:  # the next inputs live on the host, copied once a step (static_step.StepInputs)
            self.inputs = StepInputs(slots, self.pad_id, self.device)
        else:
            self.step_input = torch.full((slots,), self.pad_id, dtype=torch.long, device=self.device)
            self.position = torch.zeros(slots, dtype=torch.long, device=self.device)

    # ---- samples --------------------------------------------------------------------------------------------------

    def ends(self, tokens: list[int]) -> bool:
        """Whether a sample whose new tokens are ``tokens`` ends after the last one: EOS (kept), the length budget,
        or a stop string that it completes (kept too: the caller cuts the text). A sample that ends frees its share of
        the row (the whole slot when it was alone on it) and costs no further decode step."""
        return (
            tokens[-1] in self.eos
            or len(tokens) >= self.max_new_tokens
            or (self.stop is not None and self.stop(tokens))
        )

    def branch(self, row: _Row, tokens: list[int]) -> Iterator:
        """Split ``row``'s samples by the token each drew: finished samples yield their prompt when it completes;
        returns (via StopIteration) ``[(token, samples)]`` of those that go on, largest group first."""
        going: dict[int, list[int]] = {}
        ended: dict[int, bool] = {}  # by token: the samples of a row that drew the same token end together
        for q, token in zip(row.samples, tokens, strict=True):
            if token not in ended:
                ended[token] = self.ends([*row.history, token])
            if ended[token]:
                yield from self.finish(q, [*row.history, token])
            else:
                going.setdefault(token, []).append(q)
        return sorted(going.items(), key=lambda item: -len(item[1]))

    def finish(self, q: int, tokens: list[int]) -> Iterator[tuple[int, list[list[int]]]]:
        """Record sample ``q``'s tokens; yield its prompt's samples once they are all finished."""
        j = int(self.sample_prompt[q])
        self.results[j][q - self.offset[j]] = tokens
        self.left[j] -= 1
        self.in_flight -= 1
        if self.left[j] == 0:
            yield j, self.results[j]
            self.results[j] = None  # handed over

    # ---- prompts in -----------------------------------------------------------------------------------------------

    def fits(self, j: int) -> bool:
        """Whether prompt ``j`` may be prefilled now: nothing is in flight, or its samples and those in flight are at
        most :data:`SAMPLES_PER_SLOT` a slot."""
        return self.in_flight == 0 or self.in_flight + self.left[j] <= SAMPLES_PER_SLOT * len(self.rows)

    def prefill_more(self) -> Iterator:
        """Prefill the next prompts; their samples draw first tokens from one forward and group by token."""
        chunk = []
        while len(chunk) < self.prefill_batch and self.next_prompt < len(self.prompt_ids):
            if not self.fits(self.next_prompt):
                break
            j, self.next_prompt = self.next_prompt, self.next_prompt + 1
            if self.left[j]:
                chunk.append(j)
                self.in_flight += self.left[j]
        if not chunk:
            return
        if self.shared and self.prefix_kv is None:
            prefix = [self.prompt_ids[0][: self.shared]]
            with self.lora.active():
                (self.prefix_kv,), _ = prefill(self.model, prefix, self.pad_id, self.keep_logits)
        with self.lora.active():
            kv, logits = prefill(
                self.model,
                [self.prompt_ids[j][self.shared :] for j in chunk],
                self.pad_id,
                self.keep_logits,
                prefix=self.prefix_kv,
                cache_keyword=self.cache_keyword,
            )
        if self.cache is None:
            # most columns a row needs (its own: the shared prefix is not in the slots)
            window = max(len(ids) for ids in self.prompt_ids) - self.shared + self.max_new_tokens
            budget = self.kv_budget if self.kv_budget is not None else _default_kv_budget(self.device)
            fit = slots_within(kv[0], window, budget, static=self.static)
            if fit is not None and fit < len(self.rows):  # no row holds a slot yet: the slots can still shrink
                logger.info("%d of %d slots fit in %.1f GB for the keys/values", fit, len(self.rows), budget / 2**30)
                self._allocate_slots(fit)
            self.cache = SlotCache(kv[0], len(self.rows), window, self.device, static=self.static)
        groups = [list(range(self.offset[j], self.offset[j + 1])) for j in chunk]
        first = draw_tokens(logits, self.seed, groups, [0] * len(chunk), self.temperature, self.top_p, **self.filters)
        for row, (j, tokens) in enumerate(zip(chunk, first, strict=True)):
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
            self.cache.compact(self.live(), room_before=longest)
        # the first rows of one prompt share its prefill keys/values: copied once into all their slots
        by_kv: dict[int, list] = {}
        for slot, row in chosen:
            by_kv.setdefault(id(row.kv), [row.kv, []])[1].append(slot)
            self.set_input(slot, row.history[-1], row.position)
            row.kv, self.rows[slot] = None, row
        for kv, slots in by_kv.values():
            self.cache.place(torch.tensor(slots, device=self.device), kv)

    # ---- slots ----------------------------------------------------------------------------------------------------

    def live(self) -> list[int]:
        """The slots that hold a row."""
        return [s for s, row in enumerate(self.rows) if row is not None]

    def set_input(self, slot: int, token: int, position: int) -> None:
        """What ``slot`` feeds the next step: its row's last token, at its position."""
        if self.static:
            self.inputs.set(slot, token, position)
        else:
            self.step_input[slot], self.position[slot] = token, position

    def shrink(self, keep: list[int]) -> None:
        """Drop the slots not in ``keep`` from the batch (nothing is waiting for them any more)."""
        index = torch.tensor(keep, device=self.device)
        self.cache.select(index)
        self.rows = [self.rows[s] for s in keep]
        if self.static:
            self.inputs.select(keep)
        else:
            self.step_input, self.position = self.step_input[index], self.position[index]

    def maybe_shrink(self, live: list[int]) -> None:
        """Once nothing waits: drop free slots when half of them would idle to the end (a shrink copies the whole
        cache); a static step only to a power-of-two bucket (static_step.static_shrink_plan)."""
        if self.static:
            keep = static_shrink_plan(live, len(self.rows), self.start_slots)
            if keep is not None:
                self.shrink(keep)
        elif len(live) <= len(self.rows) // 2:
            self.shrink(live)

    def fork(self, source: int, row: _Row) -> None:
        """A new row that shares ``source``'s keys/values: into a free slot at once, else it waits with a copy."""
        free = [s for s, r in enumerate(self.rows) if r is None]
        if free:
            self.cache.copy_row(source, free[0])
            self.rows[free[0]] = row
            self.set_input(free[0], row.history[-1], row.position)
        else:
            row.kv = self.cache.window(source)
            self.waiting_forks.append(row)

    def logits(self, live: list[int]) -> torch.Tensor:
        """The forward of one step: next-token logits ``[len(live), V]`` of the ``live`` slots."""
        column = self.cache.length
        self.cache.mask[:, column] = 1  # every slot sees its own new token (free slots too: no fully masked row)
        if self.static:
            return self.static_logits(live)
        with cpu_decode_attention(self.model, self.decode_attention, self.prefix_kv), self.lora.active():
            out = self.model(
                input_ids=self.step_input.unsqueeze(1),
                attention_mask=self.cache.mask[:, : column + 1],
                position_ids=self.position.unsqueeze(1),
                **{self.cache_keyword: self.cache.cache},
                use_cache=True,
                return_dict=True,
                **self.keep_logits,
            )
        return out.logits[torch.tensor(live, device=self.device), -1, :]

    def static_logits(self, live: list[int]) -> torch.Tensor:
        """The fixed-shape forward: whole cache, whole mask, inputs at fixed addresses; the column advances after."""
        input_ids, position_ids = self.inputs.to_device()
        kwargs = dict(
            input_ids=input_ids,
            attention_mask=self.cache.mask,
            position_ids=position_ids,
            **{self.cache_keyword: self.cache.cache},
            use_cache=True,
            return_dict=True,
            **self.keep_logits,
        )
        if self.compiled is None:
            with cpu_decode_attention(self.model, self.decode_attention), self.lora.active():
                out = self.model(**kwargs)
        else:
            # a new CUDA-graph step: the last step's outputs (already drawn from) may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
            try:
                out = self.compiled(self.model, kwargs)
            except Exception as why:  # noqa: BLE001 - any compiler failure; only the first call falls back
                if self.compiled_once:
                    raise
                # nothing has advanced yet and the column write is idempotent: the same step runs again uncompiled
                logger.warning(
                    "compiled decode step failed (%s: %s): static step not compiled", type(why).__name__, why
                )
                self.compiled = None
                out = self.model(**kwargs)
            self.compiled_once = True
        self.cache.advance()
        logits = out.logits[:, -1, :]
        # with CUDA graphs this is the graph's output buffer, overwritten by the next step: the step draws from it
        # before then (draw_tokens returns host lists)
        return logits if len(live) == logits.shape[0] else logits[torch.tensor(live, device=self.device)]

    def step(self) -> Iterator:
        """One token for every live row; samples branch; rows whose samples all ended free their slot."""
        live = self.live()
        logits = self.logits(live)
        rows = [self.rows[s] for s in live]
        groups, counters = [row.samples for row in rows], [len(row.history) for row in rows]
        drawn = draw_tokens(logits, self.seed, groups, counters, self.temperature, self.top_p, **self.filters)
        for slot, row, tokens in zip(live, rows, drawn, strict=True):
            if len(tokens) == 1:  # one sample on the row (most rows, once samples diverge): nothing to branch
                token = tokens[0]
                row.history.append(token)  # a row's history is its own: forks and finished samples take copies
                if self.ends(row.history):
                    yield from self.finish(row.samples[0], row.history)
                    self.rows[slot] = None
                else:
                    row.position += 1
                    self.set_input(slot, token, row.position)
                continue
            going = yield from self.branch(row, tokens)
            if not going:
                self.rows[slot] = None
                continue
            (token, samples), *others = going
            for other, other_samples in others:  # share the row's keys/values up to here
                self.fork(slot, _Row(other_samples, [*row.history, other], row.position + 1))
            row.samples, row.history, row.position = samples, [*row.history, token], row.position + 1
            self.set_input(slot, token, row.position)

    def run(self) -> Iterator[tuple[int, list[list[int]]]]:
        while True:
            free = sum(row is None for row in self.rows)
            while (
                len(self.waiting_forks) + len(self.waiting_new) < free
                and self.next_prompt < len(self.prompt_ids)
                and self.fits(self.next_prompt)
            ):
                yield from self.prefill_more()
            self.admit()
            live = self.live()
            if not live:
                # every slot was free, so admit took all that waited, and prefilling stopped only because no prompt
                # is left: all done
                return
            nothing_waits = not (self.waiting_forks or self.waiting_new) and self.next_prompt >= len(self.prompt_ids)
            if nothing_waits:
                self.maybe_shrink(live)
            if self.cache.length + 1 > self.cache.capacity:
                self.cache.compact(self.live())  # not `live`: a shrink renumbers the slots
            yield from self.step()
