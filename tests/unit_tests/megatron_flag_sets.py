"""Megatron flag sets shared by the FLOP-count and ``oellm table`` tests."""

GPT_PATH_GDN = {"hybrid_layer_pattern": None, "num_layers": 40, "experimental_attention_variant": "gated_delta_net",
                "linear_attention_freq": 4}
"""Megatron flags of a Qwen3.5 run built as a GPTModel with GDN (the MN5 HybridEP runs) instead of a HybridModel."""
