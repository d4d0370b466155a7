"""Resume the TE-free distributed optimizer with Adam's step intact (see ``patches/distrib-optimizer-step.md``).

Without Apex or Transformer Engine, megatron-core 0.19.2's ``DistributedOptimizer`` keeps Adam's ``step`` in torch's
per-parameter state, and three places of its resume path mishandle it:

1. ``state_dict`` asserts that the per-parameter states hold exactly one step value; the checkpoint-load template is
   built before any step, with no state, so every TE-free resume stops on ``assert len(steps) == 1``;
2. ``load_state_dict`` gives every parameter the same step tensor, which torch's Adam then increments once per
   parameter and step;
3. the parameter-state load (``_set_main_param_and_optimizer_states``) copies a ``step`` from the loaded buckets
   over the one ``load_state_dict`` restored from the checkpoint's param groups (or fails when there is none).

The patch wraps those three methods: the template of an optimizer without any state gets a temporary step of 0 per
parameter (removed afterwards, so the optimizer still initialises lazily; existing state is never replaced), each
parameter gets its own copy of the restored step, and the parameter-state load leaves ``step`` alone. The step
restored is the checkpoint's param-group step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from megatron.oellm.patches.release import applies_to, megatron_core_release


def has_state(optimizer: torch.optim.Optimizer) -> bool:
    """Whether any parameter state of ``optimizer`` holds anything (the empty ones a defaultdict read adds do not
    count): the template step is only for an optimizer before its first step, never over real state."""
    return any(len(state) > 0 for state in optimizer.state.values())


def apply() -> bool:
    """Wrap the three methods on :data:`PATCHED_RELEASE` without Apex/TE; True if applied.

    Any other release (with a warning), or an environment with Apex or TE (where upstream keeps the step in the param
    groups), keeps upstream's methods. The release is checked first: ``HAVE_APEX_OR_TE`` is a 0.19.2 module global
    that another release need not have. Idempotent.
    """
    if not applies_to(megatron_core_release(), "distrib-optimizer-step"):
        return False
    from megatron.core.optimizer import distrib_optimizer

    if distrib_optimizer.HAVE_APEX_OR_TE:
        return False
    cls = distrib_optimizer.DistributedOptimizer
    if getattr(cls.state_dict, "oellm_patched", False):
        return True
    cls.state_dict = _state_dict_with_template_step(cls.state_dict)
    cls.load_state_dict = _load_state_dict_with_own_steps(cls.load_state_dict)
    cls._set_main_param_and_optimizer_states = _param_state_load_keeping_step(cls._set_main_param_and_optimizer_states)
    return True


def _patched(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``wrapper`` as this package's patch (``apply`` checks the mark to stay idempotent)."""
    wrapper.oellm_patched = True
    return wrapper


def _state_dict_with_template_step(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def state_dict(self: Any) -> dict[str, Any]:
        """Upstream's state dict; before the first step with a temporary step-0 state (megatron.oellm patch).

        Any state at all (Adam's after a step or a load, or a step-less one such as Lion's ``exp_avg``) takes
        upstream's path: replacing it by the template and popping it afterwards would discard it.
        """
        inner = self.optimizer
        if has_state(inner):
            return original(self)
        params = [param for group in inner.param_groups for param in group["params"]]
        for param in params:
            inner.state[param] = {"step": torch.tensor(0.0)}
        try:
            return original(self)
        finally:
            for param in params:
                inner.state.pop(param, None)

    return _patched(state_dict)


def _load_state_dict_with_own_steps(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        """Upstream's load; then every parameter's ``step`` is its own tensor (megatron.oellm patch)."""
        original(self, state_dict)
        for state in self.optimizer.state.values():
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].clone()

    return _patched(load_state_dict)


def _param_state_load_keeping_step(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_main_param_and_optimizer_states(self: Any, model_param: torch.nn.Parameter,
                                            tensors: dict[str, Any]) -> Any:
        """Upstream's copy of the loaded parameter state, without ``step`` (megatron.oellm patch)."""
        return original(self, model_param, {**tensors, "step": None})

    return _patched(set_main_param_and_optimizer_states)
