"""megatron-core's language models with this package's cross entropy in place of the fused "native" one.

``LanguageModule.compute_language_model_loss`` picks its loss by config and has no hook for another
implementation, so the models are subclassed (megatron-core's own extension point: the spec builders construct
these classes). With ``cross_entropy_loss_fusion`` and ``cross_entropy_fusion_impl="native"`` the loss is
:func:`megatron.oellm.layers.cross_entropy.vocab_parallel_cross_entropy` (same per-token result, no fp32 copy of the
logits); Transformer Engine's fused loss and the unfused path are megatron-core's, unchanged.
Upstream: ``patches/lean-native-cross-entropy.md``.
"""

from __future__ import annotations

from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.models.hybrid.hybrid_model import HybridModel
from torch import Tensor

from megatron.oellm.layers.cross_entropy import vocab_parallel_cross_entropy


class LeanCrossEntropyMixin:
    """Routes megatron's fused native cross entropy to :func:`vocab_parallel_cross_entropy`."""

    def compute_language_model_loss(self, labels: Tensor, logits: Tensor) -> Tensor:
        """Per-token loss ``[b, s]`` of ``logits`` ``[s, b, V/TP]`` against ``labels`` ``[b, s]``."""
        config = self.config
        if not (config.cross_entropy_loss_fusion and config.cross_entropy_fusion_impl == "native"):
            return super().compute_language_model_loss(labels, logits)
        loss = vocab_parallel_cross_entropy(logits, labels.transpose(0, 1).contiguous(), self.pg_collection.tp)
        return loss.transpose(0, 1).contiguous()


class OellmGPTModel(LeanCrossEntropyMixin, GPTModel):
    """megatron-core's ``GPTModel`` (Qwen3 MoE) with :class:`LeanCrossEntropyMixin`."""


class OellmHybridModel(LeanCrossEntropyMixin, HybridModel):
    """megatron-core's ``HybridModel`` (Qwen3.5) with :class:`LeanCrossEntropyMixin`."""
