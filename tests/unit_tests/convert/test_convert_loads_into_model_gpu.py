"""A converted checkpoint loads into the model the training entry builds (torch-native backend, one GPU).

``oellm convert hf-to-mcore`` writes no Transformer Engine ``_extra_state`` objects, while the model's sharded state
dict asks for them (the torch-native modules mirror TE's layout); megatron's loader is run with ``log_all``
strictness, as the convert README tells users to, and every converted tensor must arrive bit for bit.
"""

import pytest
import torch
from convert_helpers import random_hf_tensors, write_hf

from megatron.oellm.cards import get_card
from megatron.oellm.convert.family import hf_to_mcore
from megatron.oellm.convert.pipeline import RELEASE, hf_to_mcore_checkpoint
from tests.unit_tests.gpu_utils import init_megatron_runtime

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_converted_checkpoint_loads_bit_for_bit(name, tmp_path):
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.validation import StrictHandling

    from megatron.oellm.models import spec_builder

    init_megatron_runtime()
    card = get_card(name)
    hf = random_hf_tensors(card, seed=5)
    write_hf(card, hf, tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    builder = spec_builder(card.family)
    config = builder.transformer_config(card, params_dtype=torch.bfloat16, perform_initialization=False)
    model = builder.build_model(card, backend="torch", config=config).cuda()
    loaded = dist_checkpointing.load(model.sharded_state_dict(), str(tmp_path / "mcore" / RELEASE),
                                     strict=StrictHandling.LOG_ALL)
    result = model.load_state_dict(loaded, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    assert all(key.endswith("_extra_state") for key in result.missing_keys), result.missing_keys
    state = model.state_dict()
    expected = hf_to_mcore(card, hf)
    assert expected.keys() <= state.keys(), sorted(expected.keys() - state.keys())[:5]
    for key, tensor in expected.items():
        assert torch.equal(state[key].cpu(), tensor), key
