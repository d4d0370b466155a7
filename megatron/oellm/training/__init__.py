"""Training on ``megatron.training``'s pretrain loop: the entry point (:mod:`megatron.oellm.training.entry`), its
arguments, model and data providers, forward step, throughput line, byte tokenizer and offline corpus builder.

Submodules import megatron lazily; importing this package imports neither torch nor megatron.
"""
