"""Qwen3.5 hybrid (Gated DeltaNet + gated attention, MoE): spec builder and checkpoint conversion."""
