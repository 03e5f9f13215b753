"""KL-coefficient (beta) controllers: a fixed beta, and the adaptive controller of Ziegler et al. (2019).

Pure state machines, no torch and no trainer: the trainer calls ``update(current_kl, n_samples)`` once per
optimisation step (on ``sync_gradients``) with the step's measured KL to the reference policy, reads
``.beta`` for the next loss, and saves ``state_dict()`` next to its checkpoint.

The adaptive rule (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences", eq. 2) is a
proportional controller on ``log(beta)``:

    e = clip(current_kl / target_kl - 1, -0.2, 0.2)
    beta <- beta * (1 + e * n_samples / horizon)

then clamped to ``[beta_min, beta_max]``. KL above target raises beta (pull harder towards the reference),
below target lowers it. The clip bounds one step's change to a factor ``1 +- 0.2 * n_samples / horizon``,
so a single noisy KL estimate cannot swing beta far; ``horizon`` (in samples) sets the time constant.

The controllers are a small registry, like the gradient coefficients of :mod:`grpo_ext.advantages`:
:data:`KL_CONTROLLERS` maps the config's ``kl_controller`` value (also the ``type`` of a saved state) to a
:class:`KLControllerSpec`, which carries everything the rest of the package asks of a controller: how to build it,
whether it moves beta (the trainer feeds it the KL only then), the ranges and checks of its config fields
(`grpo_ext.validation`), and its model-card line and tag (`grpo_ext.hub.training`). No reader compares against a
controller's name. A new controller is a class with ``update`` / ``state_dict`` / ``load_state_dict`` / ``resume``
plus one :func:`register_kl_controller` call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grpo_ext.registration import qualified_name

__all__ = [
    "KL_CONTROLLERS",
    "KL_ERROR_CLIP",
    "AdaptiveKLController",
    "FixedKLController",
    "KLControllerSpec",
    "get_kl_controller",
    "new_kl_controller",
    "register_kl_controller",
]

KL_ERROR_CLIP = 0.2
"""Bound on the proportional error ``current_kl / target_kl - 1`` (Ziegler et al. 2019)."""


def _check_number(name: str, value: Any, *, positive: bool = False, allow_inf: bool = False) -> float:
    """``value`` as a float, or ``ValueError`` naming the parameter and the value."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if not positive and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _check_state(d: dict[str, Any], controller_type: str, keys: tuple[str, ...]) -> None:
    """``d`` is a state dict of a `controller_type` ("fixed"/"adaptive") controller holding `keys`, else ValueError."""
    if not isinstance(d, dict):
        raise ValueError(f"state_dict must be a dict, got {type(d).__name__}")
    if d.get("type") != controller_type:
        raise ValueError(f"state_dict is for a {d.get('type')!r} KL controller, not {controller_type!r}")
    missing = [key for key in keys if key not in d]
    if missing:
        raise ValueError(f"state_dict for a {controller_type!r} KL controller is missing {', '.join(missing)}")


class FixedKLController:
    """A constant beta (TRL's behaviour). ``update`` is a no-op, so the trainer can treat both alike."""

    def __init__(self, beta: float) -> None:
        self.beta = _check_number("beta", beta)

    def update(self, current_kl: float, n_samples: int) -> float:
        """No-op; returns ``beta``."""
        return self.beta

    def state_dict(self) -> dict[str, Any]:
        return {"type": "fixed", "beta": self.beta}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        _check_state(d, "fixed", ("beta",))
        self.beta = _check_number("beta", d["beta"])

    def resume(self, saved: dict[str, Any]) -> list[str]:
        """Resume from a checkpoint's controller state ``saved`` (any registered type): a fixed beta is the config's,
        whatever the checkpoint ran; returns one note when the checkpoint's differed (to be logged)."""
        kind = saved.get("type")
        if kind != "fixed" or saved.get("beta") != self.beta:
            return [
                f"beta: the checkpoint ran a {kind} beta (last {saved.get('beta')}); this run uses the config's fixed "
                f"beta={self.beta}"
            ]
        return []

    def __repr__(self) -> str:
        return f"FixedKLController(beta={self.beta})"


class AdaptiveKLController:
    """Adaptive beta of Ziegler et al. (2019); see the module docstring for the rule.

    Args:
        init_beta: starting beta, > 0 (a multiplicative rule cannot leave 0) and within
            ``[beta_min, beta_max]``.
        target_kl: the KL (per token, as the trainer measures it) to steer towards, > 0.
        horizon: time constant in samples, > 0: with the error clipped at +-0.2, beta changes by at most
            a factor ``1 +- 0.2 * n_samples / horizon`` per update.
        beta_min, beta_max: clamp after every update; ``0 <= beta_min <= beta_max``, ``beta_max`` may be inf.

    Note: if ``n_samples > 5 * horizon`` the factor can reach 0 or below; beta is then clamped to
    ``beta_min``, and a beta of 0 stays 0 (the update is multiplicative). Keep ``horizon`` well above the
    samples per update, as in the paper (horizon 10 000).
    """

    def __init__(
        self,
        init_beta: float,
        target_kl: float,
        horizon: float,
        beta_min: float = 0.0,
        beta_max: float = math.inf,
    ) -> None:
        init_beta = _check_number("init_beta", init_beta, positive=True)
        self.target_kl = _check_number("target_kl", target_kl, positive=True)
        self.horizon = _check_number("horizon", horizon, positive=True)
        self.beta_min = _check_number("beta_min", beta_min)
        self.beta_max = _check_number("beta_max", beta_max, allow_inf=True)
        if self.beta_min > self.beta_max:
            raise ValueError(f"beta_min={self.beta_min} must be <= beta_max={self.beta_max}")
        if not self.beta_min <= init_beta <= self.beta_max:
            raise ValueError(f"init_beta={init_beta} must lie in [beta_min={self.beta_min}, beta_max={self.beta_max}]")
        self.beta = init_beta

    def update(self, current_kl: float, n_samples: int) -> float:
        """Move beta towards keeping ``current_kl`` at ``target_kl``; returns the new beta.

        Args:
            current_kl: KL to the reference measured on the last step's samples.
            n_samples: samples behind that measurement (>= 0); the step size scales with it.

        A non-finite ``current_kl`` (NaN from an empty batch, inf from a diverged step) leaves beta
        unchanged: the clip would turn inf into a bounded step, but NaN propagates through ``clip`` and the
        product, and a NaN beta would poison every later loss and update. Skipping one measurement is cheap.
        """
        n_samples = _check_number("n_samples", n_samples)
        try:
            current_kl = float(current_kl)
        except (TypeError, ValueError):
            raise ValueError(f"current_kl must be a number, got {current_kl!r}") from None
        if not math.isfinite(current_kl):
            return self.beta
        error = min(max(current_kl / self.target_kl - 1.0, -KL_ERROR_CLIP), KL_ERROR_CLIP)
        beta = self.beta * (1.0 + error * n_samples / self.horizon)
        self.beta = min(max(beta, self.beta_min), self.beta_max)
        return self.beta

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as plain JSON: an infinite ``beta_max`` is stored as ``None``
        (strict JSON has no Infinity)."""
        return {
            "type": "adaptive",
            "beta": self.beta,
            "target_kl": self.target_kl,
            "horizon": self.horizon,
            "beta_min": self.beta_min,
            "beta_max": None if math.isinf(self.beta_max) else self.beta_max,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore beta and the hyperparameters (like torch's LR schedulers), validated as in ``__init__``.

        beta itself may be 0 here: clamping to ``beta_min = 0`` can legitimately have produced it.
        """
        _check_state(d, "adaptive", ("beta", "target_kl", "horizon", "beta_min", "beta_max"))
        beta_max = math.inf if d["beta_max"] is None else d["beta_max"]
        # Validate everything before assigning anything, so a bad dict leaves the controller untouched.
        target_kl = _check_number("target_kl", d["target_kl"], positive=True)
        horizon = _check_number("horizon", d["horizon"], positive=True)
        beta_min = _check_number("beta_min", d["beta_min"])
        beta_max = _check_number("beta_max", beta_max, allow_inf=True)
        beta = _check_number("beta", d["beta"])
        if not beta_min <= beta <= beta_max:
            raise ValueError(f"beta={beta} must lie in [beta_min={beta_min}, beta_max={beta_max}]")
        self.target_kl = target_kl
        self.horizon = horizon
        self.beta_min = beta_min
        self.beta_max = beta_max
        self.beta = beta

    def resume(self, saved: dict[str, Any]) -> list[str]:
        """Resume from a checkpoint's controller state ``saved`` (any registered type); returns one note per way this
        controller differs from the checkpoint's (to be logged).

        The config (this controller) wins, because TRL built its reference model from the config's beta: from an
        adaptive state the checkpoint's beta is kept, clamped to this controller's ``[beta_min, beta_max]``, while
        ``target_kl``, ``horizon`` and the bounds stay this controller's; from any other type the controller starts
        at its own initial beta. A malformed adaptive state is a ``ValueError``.
        """
        if saved.get("type") != "adaptive":
            return [
                f"kl_controller: the checkpoint ran a {saved.get('type')} beta={saved.get('beta')}; the adaptive "
                f"controller starts at the config's beta={self.beta}"
            ]
        checked = AdaptiveKLController(1.0, 1.0, 1.0)
        checked.load_state_dict(saved)  # validates the saved state before anything is taken from it
        notes = [
            f"{field}: the checkpoint used {theirs}; this run uses the config's {ours}"
            for field, ours, theirs in (
                ("target_kl", self.target_kl, checked.target_kl),
                ("kl_horizon", self.horizon, checked.horizon),
                ("beta_min", self.beta_min, checked.beta_min),
                ("beta_max", self.beta_max, checked.beta_max),
            )
            if ours != theirs
        ]
        beta = min(max(checked.beta, self.beta_min), self.beta_max)
        if beta != checked.beta:
            notes.append(
                f"beta: the checkpoint's adaptive beta {checked.beta} is clamped to {beta} (the config's bounds)"
            )
        self.beta = beta
        return notes

    def __repr__(self) -> str:
        return (
            f"AdaptiveKLController(beta={self.beta}, target_kl={self.target_kl}, horizon={self.horizon}, "
            f"beta_min={self.beta_min}, beta_max={self.beta_max})"
        )


# ---- the registry ---------------------------------------------------------------------------------------------------


def _no_ranges(config) -> dict[str, dict]:
    return {}


def _no_check(config) -> str | None:
    return None


def _no_card(training: dict) -> str | None:
    return None


@dataclass(frozen=True)
class KLControllerSpec:
    """A registry entry: what the config, the trainer and the model card need of one controller.

    Attributes:
        name: the ``kl_controller`` value that selects it (and the ``type`` of its saved state).
        from_config: builds the controller at its initial beta from a config holding the KL fields (``beta``,
            ``target_kl``, ``kl_horizon``, ``beta_min``, ``beta_max``).
        moves_beta: beta changes during training, so it needs beta > 0 to start, the trainer feeds it the measured
            KL and logs beta, and a checkpoint without its state loses where it had got to.
        description: one phrase for the config's help.
        ranges: config -> {field: `grpo_ext.validation.check_number` keywords} for the fields it reads, checked
            with TRL's (pure data here: the check and its message are validation.py's).
        check: config -> a message (naming the field) for a combination of its fields the ranges cannot express,
            or None.
        card: the resolved config's ``training`` section -> the model card's line on it, or None (nothing to say).
        tag: a Hub tag for a run that used it, or None.
    """

    name: str
    from_config: Callable[[Any], Any]
    moves_beta: bool
    description: str
    ranges: Callable[[Any], dict[str, dict]] = _no_ranges
    check: Callable[[Any], str | None] = _no_check
    card: Callable[[dict], str | None] = _no_card
    tag: str | None = None


def _adaptive_from_config(config) -> AdaptiveKLController:
    beta_max = config.beta_max if config.beta_max is not None else math.inf
    return AdaptiveKLController(
        config.beta, config.target_kl, config.kl_horizon, beta_min=config.beta_min, beta_max=beta_max
    )


def _adaptive_ranges(config) -> dict[str, dict]:
    # beta_min > 0: a beta clamped to 0 would stop TRL computing the reference log-probs the KL is measured with
    rules = {
        "target_kl": dict(low=0, low_open=True),
        "kl_horizon": dict(low=0, low_open=True),
        "beta_min": dict(low=0, low_open=True),
    }
    if getattr(config, "beta_max", None) is not None:
        rules["beta_max"] = dict(low=config.beta_min)
    return rules


def _adaptive_check(config) -> str | None:
    beta_max = config.beta_max if config.beta_max is not None else math.inf
    if config.beta_min <= config.beta <= beta_max:
        return None
    return (
        f"beta: the adaptive controller starts at beta, which must lie in [beta_min, beta_max] = "
        f"[{config.beta_min}, {beta_max}], got {config.beta}"
    )


def _adaptive_card(training: dict) -> str:
    return (
        f"adaptive KL coefficient (Ziegler et al. 2019): target_kl {training.get('target_kl')}, "
        f"horizon {training.get('kl_horizon')}, initial beta {training.get('beta')}"
    )


#: ``kl_controller`` value -> its entry; the first is the default (TRL's constant beta).
KL_CONTROLLERS: dict[str, KLControllerSpec] = {}


def register_kl_controller(spec: KLControllerSpec) -> KLControllerSpec:
    """Add ``spec`` to :data:`KL_CONTROLLERS`: ``kl_controller: <spec.name>`` is then a valid config value, and the
    trainer, the resume rule, the range checks and the model card read the entry. A taken name is a ``ValueError``
    unless the entry is built by the same function (its module reloaded, as `register_gradient_coefficient` allows)."""
    existing = KL_CONTROLLERS.get(spec.name)
    if existing is not None and qualified_name(existing.from_config) != qualified_name(spec.from_config):
        raise ValueError(f"KL controller {spec.name!r} is already registered")
    KL_CONTROLLERS[spec.name] = spec
    return spec


register_kl_controller(
    KLControllerSpec("fixed", lambda config: FixedKLController(config.beta), False, "beta stays constant (TRL)")
)
register_kl_controller(
    KLControllerSpec(
        "adaptive",
        _adaptive_from_config,
        True,
        "Ziegler et al. 2019, eq. 2",
        ranges=_adaptive_ranges,
        check=_adaptive_check,
        card=_adaptive_card,
        tag="adaptive-kl",
    )
)


def get_kl_controller(name: str) -> KLControllerSpec:
    """The registry entry for ``name``; ``ValueError`` naming ``kl_controller`` and the registered names."""
    try:
        return KL_CONTROLLERS[name]
    except KeyError:
        raise ValueError(
            f"kl_controller: unknown value {name!r}; expected one of {', '.join(KL_CONTROLLERS)}"
        ) from None


def new_kl_controller(config):
    """The controller ``config.kl_controller`` names, at its initial beta."""
    return get_kl_controller(config.kl_controller).from_config(config)
