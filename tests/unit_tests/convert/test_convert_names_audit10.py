"""Name and layout mappings a tenth mutation audit found untested: the canonical view of a published (multimodal)
Qwen3.5 checkpoint's tensor names, the refusal of a tensor stored under both names, and the split of the Gated
DeltaNet convolution into megatron-core's sections."""

import random

import pytest
import torch

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.hf_names import CanonicalView
from tests.unit_tests.convert.convert_helpers import random_hf_tensors

CARD = "qwen3.5-35b-a3b-tiny"


def _published(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``hf`` as the published multimodal checkpoints name it: the text model under ``model.language_model.``."""
    return {name.replace("model.", "model.language_model.", 1) if name.startswith("model.") else name: tensor
            for name, tensor in hf.items()}


def test_the_canonical_view_reads_a_published_checkpoint_under_the_text_models_names() -> None:
    """The converter reads a published checkpoint through :class:`CanonicalView`: every text-model tensor under its
    ``Qwen3_5MoeForCausalLM`` name (the stored tensor itself), nothing of the vision tower or MTP head (listed as
    skipped, sorted), and its length the number of text-model tensors."""
    hf = random_hf_tensors(get_card(CARD), seed=random.randrange(2**31))
    extra = {f"mtp.layers.{i}.fc.weight": torch.randn(2) for i in random.sample(range(9), 3)}
    extra.update({f"model.visual.blocks.{i}.attn.qkv.weight": torch.randn(2) for i in random.sample(range(9), 3)})
    stored = dict(random.sample(list({**_published(hf), **extra}.items()), len(hf) + len(extra)))  # shuffled
    view = CanonicalView(stored)
    assert len(view) == len(hf) and sorted(view) == sorted(hf)
    for name, tensor in hf.items():
        assert name in view and view[name] is stored[name.replace("model.", "model.language_model.", 1)
                                                     if name.startswith("model.") else name]
        assert torch.equal(view[name], tensor)
    assert view.skipped == sorted(extra)
    assert not any(name in view for name in extra)
    assert "model.language_model.norm.weight" not in view and "model.norm.weight" in view
    with pytest.raises(KeyError):
        view["model.language_model.norm.weight"]


def test_a_tensor_stored_under_both_names_is_refused_naming_both() -> None:
    """A checkpoint holding a tensor as ``model.X`` and as ``model.language_model.X`` is ambiguous (which one is the
    model?): the view refuses it, naming both stored names and the canonical one, instead of keeping either."""
    hf = random_hf_tensors(get_card(CARD), seed=random.randrange(2**31))
    name = random.choice(sorted(n for n in hf if n.startswith("model.")))
    stored = {**_published(hf), name: hf[name]}
    published = name.replace("model.", "model.language_model.", 1)
    with pytest.raises(ConversionError, match=rf"'{published}' and '{name}' are both '{name}' of the text model"
                       .replace(".", r"\.")):
        CanonicalView(stored)


@pytest.mark.parametrize("name", [CARD, "qwen3.5-35b-a3b"])
def test_the_gdn_convolution_is_split_into_query_key_value_sections(name: str) -> None:
    """megatron-core stores the GDN ``conv1d.weight`` as three global tensors, the query, key and value channels
    (``key_dim x key_heads`` twice, then ``value_dim x value_heads``, the HF config's shapes): each section must
    take its own rows, so that a checkpoint loads at any TP with the value channels where the model reads them."""
    from megatron.oellm.convert.family import family_module

    card = get_card(name)
    hf = family_module(card).hf_config_from_card(card)
    qk = hf.linear_key_head_dim * hf.linear_num_key_heads
    v = hf.linear_value_head_dim * hf.linear_num_value_heads
    layer = 2 * random.choice([i for i, kind in enumerate(hf.layer_types) if kind == "linear_attention"])
    shape = (2 * qk + v, 1, hf.linear_conv_kernel_dim)
    pieces = mcore_layout.pieces(card, "hybrid", f"decoder.layers.{layer}.self_attention.conv1d.weight", shape)
    prefix = f"decoder.layers.{layer}.self_attention.conv1d.weight"
    assert [(p.key, p.global_shape, p.rows, p.offset) for p in pieces] == [
        (f"{prefix}.query", (qk, 1, shape[2]), (0, qk), (0, 0, 0)),
        (f"{prefix}.key", (qk, 1, shape[2]), (qk, 2 * qk), (0, 0, 0)),
        (f"{prefix}.value", (v, 1, shape[2]), (2 * qk, 2 * qk + v), (0, 0, 0))]


def test_gdn_shapes_follow_the_hf_model_of_a_card_with_unequal_head_dims() -> None:
    """The expected HF tensor shapes of a Qwen3.5 card whose GDN key and value head dims differ and whose
    convolution is not 4 wide (both drawn at random) are the shapes of the transformers model of that card: the
    shipped cards (equal dims, width 4) hide a shape taken from the wrong field, which would refuse a valid
    checkpoint or accept a wrong one."""
    import dataclasses

    from transformers import AutoModelForCausalLM

    from megatron.oellm.convert.family import expected_shapes, family_module

    key_dim, value_dim = random.sample([8, 16, 24], 2)
    card = dataclasses.replace(get_card(CARD), linear_key_head_dim=key_dim, linear_value_head_dim=value_dim,
                               linear_conv_kernel_dim=random.choice([2, 3, 5]))
    hf_shapes, mcore_shapes = expected_shapes(card)
    model = AutoModelForCausalLM.from_config(family_module(card).hf_config_from_card(card))
    actual = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    gdn = {name: shape for name, shape in hf_shapes.items() if ".linear_attn." in name}
    assert gdn and gdn == {name: actual[name] for name in gdn}
    out_norms = {shape for name, shape in mcore_shapes.items() if name.endswith(".out_norm.weight")}
    assert out_norms == {(value_dim,)}
