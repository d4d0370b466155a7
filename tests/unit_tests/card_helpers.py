"""Helpers of the model card tests: the published Hugging Face ``config.json`` of each Qwen card's model, which the
card tests (``test_cards.py``) and the spec builder's (``models/test_specs_audit10.py``) check the cards against."""

_QWEN3_MOE_PUBLISHED = {"model_type": "qwen3_moe", "vocab_size": 151936, "head_dim": 128, "num_key_value_heads": 4,
                        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "rms_norm_eps": 1e-06,
                        "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 40960,
                        "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
                        "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
                        "sliding_window": None, "router_aux_loss_coef": 0.001}
PUBLISHED_CONFIGS = {
    # Qwen/Qwen3-30B-A3B config.json (the base release; the -2507 variants have other RoPE and context)
    "qwen3-30b-a3b": {**_QWEN3_MOE_PUBLISHED, "hidden_size": 2048, "num_hidden_layers": 48,
                      "num_attention_heads": 32, "moe_intermediate_size": 768, "max_window_layers": 48},
    # Qwen/Qwen3-235B-A22B config.json
    "qwen3-235b-a22b": {**_QWEN3_MOE_PUBLISHED, "hidden_size": 4096, "num_hidden_layers": 94,
                        "num_attention_heads": 64, "moe_intermediate_size": 1536, "max_window_layers": 94},
    # Qwen/Qwen3.5-35B-A3B config.json: the language model under text_config (vision_config left out here)
    "qwen3.5-35b-a3b": {"model_type": "qwen3_5_moe", "tie_word_embeddings": False, "text_config": {
        "model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "attention_bias": False,
        "full_attention_interval": 4,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "num_experts": 256, "num_experts_per_tok": 8,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "mlp_only_layers": [],
        "rms_norm_eps": 1e-06, "max_position_embeddings": 262144, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True}}},
}
"""The published ``config.json`` fields of each Qwen card's model, written out from the Hugging Face releases (not
derived from the cards): the expectation the cards are checked against."""
