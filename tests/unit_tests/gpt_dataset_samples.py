"""The training samples megatron-core's own GPTDataset reads from a Megatron dataset, for tests of what a run sees."""

from __future__ import annotations

from pathlib import Path


def gpt_train_samples(prefix: str | Path, samples: int, sequence_length: int,
                      cache: str | None = None) -> list[list[int]]:
    """Every training sample (token ids) of megatron-core's GPTDataset over ``prefix`` with the byte vocabulary, its
    index cache in ``cache`` (default: the dataset's own cache directory), built or reused as megatron-core does."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    config = GPTDatasetConfig(random_seed=1234, sequence_length=sequence_length, blend=([str(prefix)], None),
                              split="100,0,0", tokenizer=NullTokenizer(257), reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False, path_to_cache=cache)
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, None, None], lambda: True, config).build()
    return [train[number]["tokens"].tolist() for number in range(len(train))]
