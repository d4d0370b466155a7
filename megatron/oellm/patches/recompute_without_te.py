"""Output-discarding recompute without Transformer Engine (see ``patches/recompute-without-transformer-engine.md``).

megatron-core 0.19.2's ``CheckpointWithoutOutput(fp8=False)`` sets ``self.fp8 = fp8 is not None``, which is True for
its default ``False``. Its forward then asks Transformer Engine's ``FP8GlobalStateManager`` whether FP8 is on, a name
``tensor_parallel.random`` defines only where TE imports. So every recompute that ``TransformerLayer`` and
``GatedDeltaNet`` build with the default (``--recompute-modules layernorm``, the Jupiter recipe's setting beside
``moe_act``, and ``gdn_norm_out``) fails without TE with ``NameError: name 'FP8GlobalStateManager' is not defined``
at the first training step, after the whole start-up. Where TE imports, the same ``True`` makes the checkpoint
follow TE's FP8 state, which FP8 runs rely on, so this patch leaves that case alone.

No configuration or spec slot builds these checkpoints, so where ``FP8GlobalStateManager`` is missing this patch wraps
``CheckpointWithoutOutput.__init__`` to set ``fp8`` False after upstream's: without TE there is no FP8 to follow.
Exactly 0.19.2 (another release keeps upstream's class, with a warning).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from megatron.oellm.patches.release import applies_to, megatron_core_release


def needed() -> bool:
    """Whether megatron-core's ``tensor_parallel.random`` lacks ``FP8GlobalStateManager`` (Transformer Engine did not
    import), where an output-discarding checkpoint built with the default ``fp8`` fails."""
    from megatron.core.tensor_parallel import random as tp_random

    return not hasattr(tp_random, "FP8GlobalStateManager")


def apply() -> bool:
    """Make ``CheckpointWithoutOutput`` skip its FP8 path where :func:`needed`; True if applied (idempotent).

    The spec builders call it (:func:`megatron.oellm.models.building_blocks.spec_provider`), so every model built
    by this package can recompute norms without TE. With TE it does nothing and returns False.
    """
    if not needed():
        return False
    if not applies_to(megatron_core_release(), "recompute-without-transformer-engine"):
        return False
    from megatron.core.tensor_parallel import random as tp_random

    cls = tp_random.CheckpointWithoutOutput
    if not getattr(cls.__init__, "oellm_patched", False):
        cls.__init__ = _without_fp8(cls.__init__)
    return True


def _without_fp8(original: Callable[..., None]) -> Callable[..., None]:
    """``original`` (``CheckpointWithoutOutput.__init__``) followed by turning the FP8 path off."""

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        """Upstream's constructor, then no FP8 path: Transformer Engine is absent (megatron.oellm patch)."""
        original(self, *args, **kwargs)
        self.fp8 = False

    __init__.oellm_patched = True
    return __init__
