"""Data flags the training entry parses but does not honour are refused before Megatron allocates anything."""

import sys

import pytest

from megatron.oellm.training import data
from megatron.oellm.training.args import parse_oellm_argv

MASKING = "--dataloader-inter-document-masking"


def test_document_masking_is_refused_with_the_reason():
    """Megatron accepts the flag and only drops the dataloader's attention mask: the run trained unmasked."""
    with pytest.raises(ValueError, match="document masking is not wired in this release"):
        data.check_data_args(parse_oellm_argv([MASKING]))
    data.check_data_args(parse_oellm_argv([]))


class _Reached(Exception):
    """Raised by the stand-ins of the steps after the argument checks."""


@pytest.mark.parametrize("argv, stop", [([MASKING], ValueError), ([], _Reached)])
def test_the_entry_refuses_document_masking_before_it_starts_anything(monkeypatch, argv, stop):
    """The entry's argument checks run before the throughput hook and ``pretrain`` (which set up GPUs)."""
    import megatron.training
    import megatron.training.arguments

    from megatron.oellm.backends import selection
    from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step
    from megatron.oellm.training import entry, throughput

    def reached(*_args, **_kwargs):
        raise _Reached

    monkeypatch.setattr(sys, "argv", ["entry"])
    monkeypatch.setattr(dataset_helpers, "apply", lambda: True)
    monkeypatch.setattr(distrib_optimizer_step, "apply", lambda: True)
    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args",
                        lambda **_kwargs: parse_oellm_argv(sys.argv[1:]))
    monkeypatch.setattr(selection, "check_args_support", lambda *_args: None)
    monkeypatch.setattr(entry, "flops_and_peak", reached)
    monkeypatch.setattr(throughput, "install_throughput_logging", reached)
    monkeypatch.setattr(megatron.training, "pretrain", reached)
    with pytest.raises(stop):
        entry.main(["--oellm-backend", "torch", *argv])
