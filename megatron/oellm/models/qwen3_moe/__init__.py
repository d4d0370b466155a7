"""Qwen3 MoE (attention with QK-norm, MoE in every layer): spec builder and checkpoint conversion."""
