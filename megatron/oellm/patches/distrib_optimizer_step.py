"""Let the TE-free distributed optimizer build a checkpoint-load template (see ``patches/distrib-optimizer-step.md``).

Without Apex or Transformer Engine, megatron-core 0.19.2's ``DistributedOptimizer.state_dict`` reads Adam's ``step``
from the inner optimizer's per-parameter state and asserts that exactly one value is found. When a run resumes,
``load_checkpoint`` asks for that state dict as the template of what to load before any step was taken: the state is
empty, no value is found, and the resume stops on ``assert len(steps) == 1``. The patch gives every parameter a
temporary ``step`` of 0 for that one call (the template's value is replaced by the checkpoint's) and removes it
again, so the optimizer still initialises its state lazily on the first real step.
"""

from __future__ import annotations

import functools

import torch

from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release


def apply() -> bool:
    """Wrap ``DistributedOptimizer.state_dict`` on :data:`PATCHED_RELEASE` without Apex/TE; True if applied.

    Any other release, or an environment with Apex or TE (where upstream reads the step from the param groups),
    keeps upstream's method. Idempotent.
    """
    from megatron.core.optimizer import distrib_optimizer

    if megatron_core_release() != PATCHED_RELEASE or distrib_optimizer.HAVE_APEX_OR_TE:
        return False
    original = distrib_optimizer.DistributedOptimizer.state_dict
    if getattr(original, "oellm_patched", False):
        return True

    @functools.wraps(original)
    def state_dict(self):
        """Upstream's state dict; before the first step with a temporary step-0 state (megatron.oellm patch)."""
        inner = self.optimizer
        if len(inner.state) > 0:
            return original(self)
        params = [param for group in inner.param_groups for param in group["params"]]
        for param in params:
            inner.state[param] = {"step": torch.tensor(0.0)}
        try:
            return original(self)
        finally:
            for param in params:
                inner.state.pop(param, None)

    state_dict.oellm_patched = True
    distrib_optimizer.DistributedOptimizer.state_dict = state_dict
    return True
