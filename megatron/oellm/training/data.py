"""Training data through megatron-core's datasets: indexed ``.bin``/``.idx`` corpora (``--data-path`` and the
per-split paths) via ``BlendedMegatronDatasetBuilder`` + ``GPTDataset``, or ``MockGPTDataset`` for ``--mock-data``.

Every rank builds its own loader (the provider is marked ``is_distributed``), so no batch broadcast is needed
inside a tensor-parallel group: all its ranks draw the same samples because megatron's sampler depends on the
data-parallel rank only.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:

    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

from megatron.oellm.training.data_sources import sequences_per_dataset


def dataset_config(args: argparse.Namespace) -> GPTDatasetConfig:
    """megatron-core ``GPTDatasetConfig`` from Megatron's parsed and validated arguments.

    Every data flag of Megatron's parser that the config has a field for reaches it: a flag left out here would be
    accepted on the command line and silently do nothing (``--multiple-validation-sets`` then blended the validation
    sets into one, and megatron's evaluation, which expects one loader per set, failed at the first evaluation).
    """
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.training import get_tokenizer
    from megatron.training.utils import get_blend_and_blend_per_split

    blend, blend_per_split = get_blend_and_blend_per_split(args)
    return GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=blend,
        blend_per_split=blend_per_split,
        multiple_validation_sets=args.multiple_validation_sets,
        full_validation=args.full_validation,
        split=args.split,
        num_dataset_builder_threads=args.num_dataset_builder_threads,
        path_to_cache=args.data_cache_path,
        mmap_bin_files=args.mmap_bin_files,
        tokenizer=get_tokenizer(),
        reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask,
        eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
        object_storage_cache_path=args.object_storage_cache_path,
        mid_level_dataset_surplus=args.mid_level_dataset_surplus,
        allow_ambiguous_pad_tokens=args.allow_ambiguous_pad_tokens,
        fast_cache_load=args.dataloader_fast_cache_load,
        defer_npy_index_mmap=args.dataloader_defer_npy_index_mmap,
        sequences_per_dataset=sequences_per_dataset(args),
        context_parallel_size=args.context_parallel_size,
        data_parallel_size=args.data_parallel_size,
    )


def train_valid_test_datasets(
    train_valid_test_num_samples: list[int], vp_stage: int | None = None
) -> list[GPTDataset | None]:
    """Megatron dataset provider: the train, validation and test datasets of the current arguments."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset
    from megatron.training import get_args, print_rank_0

    args = get_args()
    config = dataset_config(args)
    dataset_type = MockGPTDataset if args.mock_data else GPTDataset
    print_rank_0(f"> building {dataset_type.__name__} train, validation and test datasets")
    return BlendedMegatronDatasetBuilder(dataset_type, train_valid_test_num_samples, lambda: True, config).build()


train_valid_test_datasets.is_distributed = True
