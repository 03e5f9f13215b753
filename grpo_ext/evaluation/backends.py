"""Sampling backends: ``generate(prompts, params) -> list[list[str]]`` (``params.n`` completions per prompt).

- :class:`TransformersBackend`: a model in memory (the trainer's policy) or loaded from a folder: a full model,
  or a PEFT adapter folder (``adapter_config.json`` naming ``base_model_name_or_path``) loaded onto its base as it
  was trained (a QLoRA adapter on the base quantised as its run recorded) and, on a full-precision base, merged
  into one model. Samples with :func:`grpo_ext.sampler.sampling.sample` (continuous batching).
- :class:`VLLMBackend`: vLLM's offline ``LLM``, one request per prompt with ``SamplingParams(n=...)`` (vLLM
  shares the prompt's prefix across the ``n`` samples itself). vLLM is imported only when this backend is built.

Both honour ``SamplingParams.stop`` as lm-eval's ``until`` does (a sample's text is cut before its stop string):
the transformers backend ends the sample at the token that completes it (:mod:`grpo_ext.sampler.stops`), vLLM
through its own ``stop``.

:func:`load_backend` picks one by name: ``auto`` is vLLM when it is importable and a CUDA GPU is present,
transformers otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.evaluation.cache import model_fingerprint  # re-exported: callers import it from here too
from grpo_ext.model_files import check_tokenizer, check_weights
from grpo_ext.model_paths import resolve_model_path
from grpo_ext.sampler.sampling import SamplingParams, derive_seed, sample, sample_stream
from grpo_ext.sampler.stops import cut_at_stop

logger = logging.getLogger(__name__)

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "TransformersBackend",
    "VLLMBackend",
    "load_backend",
    "load_model_and_tokenizer",
    "model_fingerprint",
    "vllm_available",
]

BACKENDS = ("auto", "transformers", "vllm")


class BackendUnavailableError(UserError):
    """A backend was asked for by name but cannot run here (e.g. vLLM is not installed)."""


class Backend:
    """What the harness needs from a backend."""

    #: How reports and the sample cache name the model (the name or path the user gave).
    name: str = "model"
    #: A short hash of the model's files (None for a model in memory): cached samples of a model that has since
    #: been retrained in the same folder are not reused.
    fingerprint: str | None = None
    #: Which backend this is: the ``backend`` value of :func:`load_backend` that builds it (``transformers``,
    #: ``vllm``), recorded as ``backend`` in each result.
    backend_name: str = "base"

    def generate(self, prompts: Sequence[str], params: SamplingParams, *, progress: bool = False) -> list[list[str]]:
        """``params.n`` completions for each prompt, in prompt order; deterministic for ``params.seed``."""
        raise NotImplementedError

    def generate_stream(
        self, prompts: Sequence[str], params: SamplingParams, *, progress: bool = False
    ) -> Iterator[tuple[int, list[str]]]:
        """``(prompt index, its completions)`` as they are ready, in any order. The harness hands a backend all the
        prompts at once through this (so a continuous-batching backend keeps its slots full) and saves each result
        as it arrives. By default: :meth:`generate`, ``params.batch_size`` prompts a call."""
        for start in range(0, len(prompts), params.batch_size):
            outputs = self.generate(prompts[start : start + params.batch_size], params, progress=progress)
            yield from enumerate(outputs, start)


# ----------------------------------------------------------------------------------------------------------------
# model folders


def _adapter_base(folder: Path, base_model: str | None) -> str:
    config_file = folder / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{config_file}: not valid JSON ({err})") from None
    base = base_model or config.get("base_model_name_or_path")
    if not base:
        raise UserError(
            f"{config_file} names no base_model_name_or_path: pass the base model explicitly (base_model=...)"
        )
    try:
        return resolve_model_path(base)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"adapter {folder}: its base model is missing: {err}") from None


def _is_adapter(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    trust_remote_code: bool = False,
    dtype=None,
    device: str | None = None,
    base_model: str | None = None,
    merge_adapter: bool = True,
    adapter_base: str = "as_trained",
):
    """``(model, tokenizer)`` in eval mode for a model folder, an adapter folder, ``embedded`` or a hub id.

    Weights are read from safetensors only; ``trust_remote_code`` stays off unless asked. An adapter folder is
    loaded onto its base (``base_model`` overrides the one named in ``adapter_config.json``). ``adapter_base``:
    ``as_trained`` loads the base quantised when the adapter's run record (``grpo_ext_config.yaml``) says it was
    trained on a 4- or 8-bit base (QLoRA: the adapter learnt to correct that base, and on the full-precision
    weights it is a perturbation; the main job's adapters measured +0.06 to +0.07 pass@1 over the 4-bit base and
    -0.02 over the fp32 one), ``full_precision`` always loads the base unquantised. With ``merge_adapter`` an
    adapter on a full-precision base is merged into it (one plain model: faster sampling); on a quantised base it
    stays a PEFT model (merging would round it into the 4-bit weights). The tokenizer comes from the adapter
    folder when it has one (TRL saves it there), else from the base.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    folder = Path(path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = torch.float32 if device == "cpu" else "auto"
    is_adapter = _is_adapter(folder)
    base_path = _adapter_base(folder, base_model) if is_adapter else path
    tokenizer_source = path if (is_adapter and _has_tokenizer(folder)) else base_path
    # A torn or missing weights file, named (safetensors' own error names none); a hub id is no folder: skipped.
    check_weights(folder, "model")
    if is_adapter:
        check_weights(base_path, "base model")
    check_tokenizer(tokenizer_source, "model")
    kwargs = {"trust_remote_code": trust_remote_code, "use_safetensors": True, "dtype": dtype}
    quantized = adapter_quantization(folder, adapter_base)
    if quantized is not None:
        from grpo_ext.policy_loading import quant_compute_dtype, quantization_config

        # bitsandbytes places the quantised weights at load (a 4-bit model cannot be moved with `.to`)
        kwargs.update(quantization_config=quantization_config(quantized), device_map={"": device})
        kwargs["dtype"] = quant_compute_dtype(quantized)
    try:
        model = AutoModelForCausalLM.from_pretrained(base_path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=trust_remote_code)
    except OSError as err:  # no weights / not a model / hub id while offline
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise FileNotFoundError(f"cannot load model {name_or_path!r} ({base_path}): {first}") from err
    if is_adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, path)
        if quantized is not None:
            from grpo_ext.policy_loading import prepare_quantized_policy

            prepare_quantized_policy(model)  # the 4-bit layers compute as in training (no CPU inference repack)
            return model.eval(), _with_pad(tokenizer)
        if merge_adapter:
            model = model.merge_and_unload()
    return model.to(device).eval(), _with_pad(tokenizer)


def _with_pad(tokenizer):
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_fingerprint(
    name_or_path: str, *, base_model: str | None = None, adapter_base: str | None = None
) -> str | None:
    """The sample cache's fingerprint of a model as :func:`load_model_and_tokenizer` loads it: its files (an
    adapter's base's too) and, for an adapter loaded onto a quantised base, that quantisation."""
    path = resolve_model_path(name_or_path)
    quantized = adapter_quantization(Path(path), adapter_base or "as_trained")
    base_load = None
    if quantized is not None:
        from grpo_ext.policy_loading import QUANTIZATION_FIELDS

        fields = {name: getattr(quantized, name) for name in QUANTIZATION_FIELDS}
        base_load = json.dumps(fields, sort_keys=True, default=str)
    return model_fingerprint(path, base_model, base_load=base_load)


#: How an adapter's base is loaded (`load_model_and_tokenizer(adapter_base=...)`, the harness's --adapter-base).
ADAPTER_BASES = ("as_trained", "full_precision")


def adapter_quantization(folder: Path, adapter_base: str = "as_trained"):
    """The `ModelConfig` an adapter's base is quantised with when it is loaded as ``adapter_base`` says (None: full
    precision)."""
    if adapter_base not in ADAPTER_BASES:
        raise UserError(f"adapter_base: expected one of {', '.join(ADAPTER_BASES)}, got {adapter_base!r}")
    if adapter_base == "full_precision" or not _is_adapter(folder):
        return None
    from grpo_ext.policy_loading import trained_quantization

    return trained_quantization(folder)


# ----------------------------------------------------------------------------------------------------------------
# transformers


class TransformersBackend(Backend):
    """Samples with a transformers model (continuous batching; see :mod:`grpo_ext.sampler.sampling`).

    Build it from a model in memory (``TransformersBackend(model, tokenizer)``, e.g. the trainer's policy, PEFT
    or not) or from a folder with :meth:`from_pretrained`.
    """

    backend_name = "transformers"

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str = "model",
        fingerprint: str | None = None,
        continuous: bool | None = None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.name, self.fingerprint, self.continuous = name, fingerprint, continuous

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, continuous: bool | None = None, **load_kwargs):
        model, tokenizer = load_model_and_tokenizer(name_or_path, **load_kwargs)
        fingerprint = load_fingerprint(
            name_or_path, base_model=load_kwargs.get("base_model"), adapter_base=load_kwargs.get("adapter_base")
        )
        return cls(model, tokenizer, name=name_or_path, fingerprint=fingerprint, continuous=continuous)

    def generate(self, prompts: Sequence[str], params: SamplingParams, *, progress: bool = False) -> list[list[str]]:
        return sample(self.model, self.tokenizer, prompts, params, progress=progress, continuous=self.continuous)

    def generate_stream(
        self, prompts: Sequence[str], params: SamplingParams, *, progress: bool = False
    ) -> Iterator[tuple[int, list[str]]]:
        return sample_stream(self.model, self.tokenizer, prompts, params, progress=progress, continuous=self.continuous)


# ----------------------------------------------------------------------------------------------------------------
# vLLM


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMBackend(Backend):
    """vLLM's offline engine: one request per prompt, ``SamplingParams(n=params.n, ...)`` and a per-prompt seed.

    ``llm`` and ``sampling_params_cls`` can be injected (tests use fakes); otherwise vLLM is imported here and
    ``vllm.LLM(model=...)`` is built, with ``enable_lora`` and a ``LoRARequest`` for an adapter folder.
    """

    backend_name = "vllm"

    def __init__(
        self,
        name_or_path: str | None = None,
        *,
        llm=None,
        sampling_params_cls=None,
        lora_request=None,
        trust_remote_code: bool = False,
        name: str | None = None,
        **llm_kwargs,
    ):
        if llm is None or sampling_params_cls is None:
            if not vllm_available():
                raise BackendUnavailableError(
                    "backend 'vllm' was asked for but vllm is not installed here "
                    "(pip install vllm on a CUDA machine, or use --backend transformers)"
                )
            import vllm

            sampling_params_cls = sampling_params_cls or vllm.SamplingParams
        fingerprint = None
        if llm is None:
            if name_or_path is None:
                raise ValueError("VLLMBackend needs a model name or path (or an llm object)")
            path = resolve_model_path(name_or_path)
            folder = Path(path)
            if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
                from vllm.lora.request import LoRARequest

                rank = json.loads((folder / "adapter_config.json").read_text()).get("r", 16)
                llm_kwargs.setdefault("enable_lora", True)
                llm_kwargs.setdefault("max_lora_rank", max(8, int(rank)))
                lora_request = lora_request or LoRARequest("adapter", 1, path)
                path = _adapter_base(folder, None)
            fingerprint = model_fingerprint(folder)
            llm = vllm.LLM(model=path, trust_remote_code=trust_remote_code, **llm_kwargs)
        self.llm, self.sampling_params_cls, self.lora_request = llm, sampling_params_cls, lora_request
        self.name = name or name_or_path or "vllm-model"
        self.fingerprint = fingerprint

    def requests(self, prompts: Sequence[str], params: SamplingParams) -> list:
        """One vLLM ``SamplingParams`` per prompt (its own seed, so a prompt's samples do not depend on the batch).

        Stop strings go to vLLM's ``stop``: vLLM ends a sample when its new text holds one and hands back the text
        before it (``include_stop_str_in_output`` off, its default), as :func:`~grpo_ext.sampler.stops.cut_at_stop`
        cuts (vLLM takes the first stop string *in list order* among those the last token completed, which differs
        only where two of them complete at the same token). Passed only when there are some (the request is then the
        one it always was)."""
        stop = {"stop": list(params.stop)} if params.stop else {}
        return [
            self.sampling_params_cls(
                n=params.n,
                temperature=float(params.temperature),
                top_p=float(params.top_p) if params.temperature > 0 else 1.0,
                max_tokens=params.max_new_tokens,
                seed=derive_seed(params.seed, params.n, prompt) % (2**31),
                **stop,
            )
            for prompt in prompts
        ]

    def generate(self, prompts: Sequence[str], params: SamplingParams, *, progress: bool = False) -> list[list[str]]:
        prompts = list(prompts)
        if not prompts:
            return []
        kwargs = {"use_tqdm": progress}
        if self.lora_request is not None:
            kwargs["lora_request"] = self.lora_request
        outputs = self.llm.generate(prompts, self.requests(prompts, params), **kwargs)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        # vLLM has cut each text already; cutting again changes nothing then, and keeps the harness's contract with
        # an engine (or a fake) that does not honour `stop`
        return [[cut_at_stop(completion.text, params.stop) for completion in output.outputs] for output in outputs]


# ----------------------------------------------------------------------------------------------------------------


def load_backend(name_or_path: str, backend: str = "auto", **kwargs) -> Backend:
    """A backend for a model: ``backend`` is ``auto`` (vLLM if importable and a GPU is present, else
    transformers), ``transformers`` or ``vllm``. ``kwargs`` go to the backend (``trust_remote_code``, ...)."""
    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        import torch

        backend = "vllm" if vllm_available() and torch.cuda.is_available() else "transformers"
    if backend == "vllm":
        adapter_base = kwargs.pop("adapter_base", "as_trained")
        if adapter_quantization(Path(resolve_model_path(name_or_path)), adapter_base) is not None:
            logger.warning("%s: vLLM loads the adapter onto the full-precision base, not its 4-bit one", name_or_path)
        return VLLMBackend(name_or_path, **kwargs)
    return TransformersBackend.from_pretrained(name_or_path, **kwargs)
