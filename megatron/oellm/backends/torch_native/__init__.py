"""The torch-native backend: megatron-core spec modules on plain torch kernels, no Transformer Engine.

Modules keep Transformer Engine's parameter names and distributed-checkpoint keys (the norms' ``_extra_state``
included), so checkpoints move between backends.
"""

from megatron.oellm.backends.torch_native.provider import TorchNativeSpecProvider

__all__ = ["TorchNativeSpecProvider"]
