"""Edge cases of the layers' kernels found in review: the vocabulary-parallel cross entropy at large fp32 logits (one
rank and four gloo ranks), on the CPU with the eager functions and, re-run with ``TRITON_INTERPRET=1``, with the
Triton kernels; and the compiled kernels on the GPU."""

import os

import pytest
import torch
import torch.multiprocessing as mp
from megatron.core import parallel_state

from megatron.oellm.layers.cross_entropy import cross_entropy_reference, vocab_parallel_cross_entropy
from megatron.oellm.runtime import free_port
from tests.unit_tests.cpu_megatron import gloo_world
from tests.unit_tests.models.hf_reference import fresh_seed
from tests.unit_tests.triton_interpreter import assert_pass_in_the_interpreter, skip_when_interpreting

LOSS_ATOL = 1e-5
"""Absolute loss error allowed at logits of magnitude 1e4: the loss (about 10) to a few fp32 steps. A log-sum-exp
held as one fp32 number there is itself rounded to a step of 9.8e-4 (errors up to 4.9e-4 measured)."""
GRAD_RTOL = 1e-6
"""Relative L2 error allowed on the fp32 logits gradient; a softmax taken against that rounded log-sum-exp is off
by a common factor of up to 1 +- 4.9e-4 (6e-5 to 9e-5 measured; the fix: 3e-8)."""


def large_logits(tokens: int, vocab: int, offset: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 logits ``offset + 3 * randn`` (a realistic spread around a large level), targets, upstream gradient."""
    generator = torch.Generator().manual_seed(seed)
    logits = (offset + 3 * torch.randn(tokens, vocab, generator=generator, dtype=torch.float64)).float()
    target = torch.randint(0, vocab, (tokens,), generator=generator)
    grad_loss = torch.rand(tokens, generator=generator) + 0.5
    return logits, target, grad_loss


def check_large_logits(logits, target, grad_loss, group=None, vocab_slice: slice = slice(None)) -> None:
    """Loss and this rank's gradient slice against the float64 definition, at :data:`LOSS_ATOL` and
    :data:`GRAD_RTOL`."""
    reference = logits.double().requires_grad_()
    expected = cross_entropy_reference(reference, target)
    expected.backward(grad_loss.double())
    local = logits[:, vocab_slice].clone().requires_grad_()
    loss = vocab_parallel_cross_entropy(local, target, group)
    loss.backward(grad_loss)
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=0, atol=LOSS_ATOL)
    expected_grad = reference.grad[:, vocab_slice]
    error = float((local.grad.double() - expected_grad).norm() / expected_grad.norm())
    assert error <= GRAD_RTOL, error


@pytest.mark.parametrize("offset", [1e4, -1e4])
def test_cross_entropy_at_large_fp32_logits_keeps_fp32_precision(offset):
    """Two kernel blocks (4,096 columns each) per row; the targets anywhere."""
    check_large_logits(*large_logits(24, 5000, offset, fresh_seed()))


def _large_logits_rank(rank: int, world: int, port: int, seed: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with gloo_world(rank, world, port, tensor_model_parallel_size=world):
        logits, target, grad_loss = large_logits(16, 4 * 300, 1e4, seed)
        part = logits.shape[-1] // world
        logits[:, part:2 * part] -= 6.0  # each rank's maximum differs from the global one
        logits[:, 2 * part:3 * part] += 4.0
        target[:4] = torch.tensor([part - 1, part, 2 * part, world * part - 1])  # the slices' edges
        check_large_logits(logits, target, grad_loss, parallel_state.get_tensor_model_parallel_group(),
                           slice(rank * part, (rank + 1) * part))


def test_cross_entropy_at_large_fp32_logits_over_four_ranks_keeps_fp32_precision():
    mp.start_processes(_large_logits_rank, args=(4, free_port(), fresh_seed()), nprocs=4, join=True,
                       start_method="spawn")


@skip_when_interpreting
def test_the_triton_kernels_pass_the_same_tests_in_the_interpreter():
    """This module's CPU tests once more, with ``TRITON_INTERPRET=1``: the kernels run instead of the eager code."""
    assert_pass_in_the_interpreter(__file__)


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [1e4, -1e4])
def test_compiled_cross_entropy_kernels_at_large_fp32_logits_keep_fp32_precision(offset):
    """Qwen3.5's vocabulary over TP 8 (31,040 columns), 512 tokens, logits around +-1e4 in fp32."""
    logits, target, grad_loss = large_logits(512, 248320 // 8, offset, fresh_seed())
    reference = logits.double().requires_grad_()
    expected = cross_entropy_reference(reference, target)
    expected.backward(grad_loss.double())
    local = logits.cuda().requires_grad_()
    loss = vocab_parallel_cross_entropy(local, target.cuda())
    loss.backward(grad_loss.cuda())
    torch.testing.assert_close(loss.cpu().double(), expected.detach(), rtol=0, atol=LOSS_ATOL)
    error = float((local.grad.cpu().double() - reference.grad).norm() / reference.grad.norm())
    assert error <= GRAD_RTOL, error
