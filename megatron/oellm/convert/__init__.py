"""Checkpoint conversion between Hugging Face safetensors and megatron-core distributed checkpoints
(``oellm convert``); the families' own maps are in ``megatron/oellm/models/<family>/convert.py``."""
