"""Our vocabulary-parallel cross entropy against the float64 definition on the CPU (one rank and a vocabulary split
over two gloo ranks; fp32 logits around +-1e4 on one and four ranks), both with the eager functions and with the
Triton kernels run by Triton's interpreter, and on the GPU at Qwen3.5's real vocabulary, where megatron-core's fused
native cross entropy is a second reference, and at +-1e4."""

import contextlib
import os
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from megatron.core import parallel_state

from megatron.oellm.layers.cross_entropy import cross_entropy_reference, vocab_parallel_cross_entropy
from megatron.oellm.models.language_model import LeanCrossEntropyMixin
from megatron.oellm.runtime import free_port
from tests.unit_tests.cpu_megatron import gloo_world
from tests.unit_tests.models.hf_reference import fresh_seed
from tests.unit_tests.triton_interpreter import assert_pass_in_the_interpreter, skip_when_interpreting

GRAD_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 8e-3}
"""Relative L2 error allowed on the logits gradient: fp32 round-off, or one bf16 rounding of each element."""


def random_case(tokens: tuple[int, ...], vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 logits with a realistic spread (std 3), targets over the whole vocabulary, an upstream gradient."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*tokens, vocab, generator=generator, dtype=torch.float64)
    target = torch.randint(0, vocab, tokens, generator=generator)
    grad_loss = torch.rand(tokens, generator=generator, dtype=torch.float64) + 0.5
    return logits, target, grad_loss


def reference_loss_and_grad(logits: torch.Tensor, target: torch.Tensor, grad_loss: torch.Tensor):
    """float64 loss and logits gradient of the definition, from autograd."""
    logits = logits.double().detach().requires_grad_()
    loss = cross_entropy_reference(logits, target)
    loss.backward(grad_loss.double())
    return loss.detach(), logits.grad


def squared_error_and_norm(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """float64 ``|actual - expected|^2`` and ``|expected|^2``: one chunk's share of a relative L2 error."""
    expected = expected.double()
    return float((actual.double() - expected).square().sum()), float(expected.square().sum())


def pooled_relative_error(chunks: list[tuple[float, float]]) -> float:
    """The relative L2 error of the whole tensor from its chunks' :func:`squared_error_and_norm`."""
    return (sum(d for d, _ in chunks) / sum(n for _, n in chunks)) ** 0.5


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative L2 error of ``actual`` against ``expected``, in float64."""
    return pooled_relative_error([squared_error_and_norm(actual, expected)])


def check_against_reference(logits: torch.Tensor, target: torch.Tensor, grad_loss: torch.Tensor,
                            group=None, vocab_slice: slice = slice(None)) -> None:
    """Loss (fp32, from the very logits given) and this rank's gradient slice against the float64 definition."""
    expected_loss, expected_grad = reference_loss_and_grad(logits, target, grad_loss.double())
    local = logits[..., vocab_slice].detach().clone().requires_grad_()
    loss = vocab_parallel_cross_entropy(local, target, group)
    loss.backward(grad_loss.to(loss.dtype))
    assert loss.dtype == torch.float32 and local.grad.dtype == logits.dtype
    torch.testing.assert_close(loss.double(), expected_loss, rtol=1e-5, atol=1e-5)
    expected_grad = expected_grad[..., vocab_slice]
    if not expected_grad.any():  # a slice of -inf logits only: no relative error, the gradient must be exactly 0
        assert not local.grad.any(), "a zero gradient expected"
        return
    assert relative_error(local.grad, expected_grad) <= GRAD_TOLERANCE[logits.dtype]


@pytest.mark.parametrize("vocab", [1000, 9000], ids=["one-block", "three-blocks"])  # kernel block: 4096 columns
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_rank_matches_the_definition(dtype, vocab):
    logits, target, grad_loss = random_case((17, 3), vocab, seed=fresh_seed())
    check_against_reference(logits.to(dtype), target, grad_loss)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_masked_first_block_matches_the_definition(dtype):
    """The first kernel block (4,096 columns) of every row all -inf (masked logits), the targets beyond it: the
    running max starts at -inf there, which must not turn ``exp(-inf - -inf)`` into a NaN loss."""
    seed = fresh_seed()
    logits, _, grad_loss = random_case((5, 2), 9000, seed)
    logits[..., :4096] = float("-inf")
    target = torch.randint(4096, 9000, (5, 2), generator=torch.Generator().manual_seed(seed))
    check_against_reference(logits.to(dtype), target, grad_loss)


@skip_when_interpreting
def test_bf16_logits_gradient_is_the_correctly_rounded_float64_result():
    """The gradient is computed in fp32 from bf16 logits and an fp32 upstream gradient that varies per token, so the
    bf16 gradient is the float64 one rounded once to bf16 for all but a rare element next to a rounding tie (4e-5 of
    them in 64 x 2000, 20 draws). An upstream gradient rounded to bf16 on the way rounds 27 % of them the other way,
    which :data:`GRAD_TOLERANCE` (one bf16 rounding, 8e-3) cannot tell apart. The eager path only: Triton's
    interpreter casts fp32 to bf16 by truncation."""
    logits, target, grad_loss = random_case((32, 2), 2000, seed=fresh_seed())
    logits = logits.bfloat16()
    _, expected_grad = reference_loss_and_grad(logits, target, grad_loss.float())
    given = logits.clone().requires_grad_()
    vocab_parallel_cross_entropy(given, target).backward(grad_loss.float())
    assert given.grad.dtype == torch.bfloat16
    mismatched = (given.grad != expected_grad.bfloat16()).double().mean().item()
    assert mismatched < 1e-2, f"{mismatched:.2%} of the bf16 logits gradients are not the correctly rounded result"


def _split_vocabulary_rank(rank: int, world: int, port: int, seed: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with gloo_world(rank, world, port, tensor_model_parallel_size=world):
        logits, target, grad_loss = random_case((9, 2), 512, seed)
        part = logits.shape[-1] // world
        target[0] = torch.tensor([part - 1, part])  # the last id of rank 0's slice and the first of rank 1's
        masked = logits.clone()  # rank 0's whole slice -inf (masked logits), every target on rank 1
        masked[..., :part] = float("-inf")
        masked_target = target.clamp(min=part)
        for dtype in (torch.float32, torch.bfloat16):
            for case_logits, case_target in ((logits, target), (masked, masked_target)):
                check_against_reference(case_logits.to(dtype), case_target, grad_loss,
                                        parallel_state.get_tensor_model_parallel_group(),
                                        slice(rank * part, (rank + 1) * part))


def test_vocabulary_split_over_two_ranks_matches_the_definition():
    mp.start_processes(_split_vocabulary_rank, args=(2, free_port(), fresh_seed()), nprocs=2, join=True,
                       start_method="spawn")


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


def check_large_logits(logits, target, grad_loss, group=None, vocab_slice: slice = slice(None),
                       device: str = "cpu") -> None:
    """Loss and this rank's gradient slice, computed on ``device``, against the float64 definition on the CPU, at
    :data:`LOSS_ATOL` and :data:`GRAD_RTOL`."""
    reference = logits.double().requires_grad_()
    expected = cross_entropy_reference(reference, target)
    expected.backward(grad_loss.double())
    local = logits[:, vocab_slice].to(device).clone().requires_grad_()
    loss = vocab_parallel_cross_entropy(local, target.to(device), group)
    loss.backward(grad_loss.to(device))
    torch.testing.assert_close(loss.cpu().double(), expected.detach(), rtol=0, atol=LOSS_ATOL)
    expected_grad = reference.grad[:, vocab_slice]
    error = float((local.grad.cpu().double() - expected_grad).norm() / expected_grad.norm())
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


def test_the_kernels_launch_inside_the_logits_device_context(monkeypatch):
    """Triton launches on the current GPU, which need not be the logits' (one process driving two GPUs): forward and
    backward kernels must run inside ``on_device`` of the logits, as RMSNorm's and the permutation's do. The kernels
    are stood in for by the eager functions here, which check where they are called from."""
    from megatron.oellm.layers import cross_entropy, cross_entropy_kernels

    inside: list[torch.Tensor] = []
    calls: list[str] = []

    @contextlib.contextmanager
    def recording_on_device(tensor):
        inside.append(tensor)
        yield
        inside.pop()

    def checked(name, eager):
        def run(logits, *args):
            assert inside and inside[-1].data_ptr() == logits.data_ptr(), f"{name} launched outside on_device"
            calls.append(name)
            return eager(logits, *args)
        return run

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(cross_entropy, "on_device", recording_on_device, raising=False)
    monkeypatch.setattr(cross_entropy_kernels, "row_stats", checked("row_stats", cross_entropy._row_stats_eager))
    monkeypatch.setattr(cross_entropy_kernels, "logits_grad", checked("logits_grad", cross_entropy._logits_grad_eager))
    logits, target, grad_loss = random_case((6, 2), 300, seed=fresh_seed())
    check_against_reference(logits.float(), target, grad_loss)
    assert calls == ["row_stats", "logits_grad"]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_compiled_kernels_on_a_gpu_other_than_the_current_one_match_the_definition():
    """Logits on ``cuda:1`` while ``cuda:0`` is current: the kernels run on the logits' GPU."""
    logits, target, grad_loss = random_case((64, 2), 9000, seed=fresh_seed())
    with torch.cuda.device(0):
        local = logits.to("cuda:1", torch.bfloat16).requires_grad_()
        loss = vocab_parallel_cross_entropy(local, target.to("cuda:1"))
        loss.backward(grad_loss.to("cuda:1", torch.float32))
        torch.cuda.synchronize(1)
    expected_loss, expected_grad = reference_loss_and_grad(local.detach().cpu(), target, grad_loss)
    torch.testing.assert_close(loss.cpu().double(), expected_loss, rtol=1e-5, atol=1e-5)
    assert relative_error(local.grad.cpu(), expected_grad) <= GRAD_TOLERANCE[torch.bfloat16]


def test_bad_inputs_are_refused():
    logits = torch.randn(4, 2, 10)
    with pytest.raises(ValueError, match="token axes"):
        vocab_parallel_cross_entropy(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        vocab_parallel_cross_entropy(logits, torch.zeros(4, 2))


def test_int32_token_ids_give_the_loss_and_gradient_of_int64_ones():
    """The contract takes int32 targets too (megatron's data loaders hand either): same loss and gradient."""
    logits, target, grad_loss = random_case((9, 2), 300, seed=fresh_seed())
    results = []
    for dtype in (torch.int64, torch.int32):
        local = logits.float().requires_grad_()
        loss = vocab_parallel_cross_entropy(local, target.to(dtype))
        loss.backward(grad_loss.float())
        results.append((loss, local.grad))
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    check_against_reference(logits.float(), target.int(), grad_loss)


class _Megatron:
    """Stands in for megatron's LanguageModule: its own loss is recognisable."""

    def compute_language_model_loss(self, labels, logits):
        return "megatron"


class _Model(LeanCrossEntropyMixin, _Megatron):
    def __init__(self, fusion: bool, impl: str):
        self.config = SimpleNamespace(cross_entropy_loss_fusion=fusion, cross_entropy_fusion_impl=impl)
        self.pg_collection = SimpleNamespace(tp=None)


def test_models_use_it_for_the_fused_native_loss_only():
    logits, target, _ = random_case((5, 2), 64, seed=3)  # [s, b, V]; megatron hands labels as [b, s]
    loss = _Model(True, "native").compute_language_model_loss(target.T, logits.float())
    torch.testing.assert_close(loss.double(), cross_entropy_reference(logits.float(), target).T)
    assert _Model(True, "te").compute_language_model_loss(target.T, logits) == "megatron"
    assert _Model(False, "native").compute_language_model_loss(target.T, logits) == "megatron"


@pytest.mark.gpu
def test_compiled_kernels_at_the_real_vocabulary_match_the_definition_and_megatron(megatron_runtime):
    """Qwen3.5's vocabulary, 8,800 tokens: 2.19e9 bf16 logits, past int32 offsets (the kernels index in int64). The
    float64 definition is evaluated 1,100 tokens at a time so the test fits beside the other GPU tests."""
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy

    tokens, vocab, rows = 8800, 248320, 1100
    generator = torch.Generator(device="cuda").manual_seed(fresh_seed())
    logits = torch.randn(tokens, 1, vocab, generator=generator, device="cuda", dtype=torch.bfloat16).mul_(3)
    target = torch.randint(0, vocab, (tokens, 1), generator=generator, device="cuda")
    grad_loss = torch.rand(tokens, 1, generator=generator, device="cuda") + 0.5
    group = parallel_state.get_tensor_model_parallel_group()

    ours = logits.clone().requires_grad_()
    ours_loss = vocab_parallel_cross_entropy(ours, target, group)
    ours_loss.backward(grad_loss)
    assert ours_loss.dtype == torch.float32 and ours.grad.dtype == torch.bfloat16
    against_definition = []
    for start in range(0, tokens, rows):
        part = slice(start, start + rows)
        expected_loss, expected_grad = reference_loss_and_grad(logits[part], target[part], grad_loss[part])
        torch.testing.assert_close(ours_loss[part].double(), expected_loss, rtol=1e-5, atol=1e-5)
        against_definition.append(squared_error_and_norm(ours.grad[part], expected_grad))
        del expected_grad
    assert pooled_relative_error(against_definition) <= GRAD_TOLERANCE[torch.bfloat16]

    theirs = logits.requires_grad_()
    theirs_loss = fused_vocab_parallel_cross_entropy(theirs, target, group)
    theirs_loss.backward(grad_loss.to(theirs_loss.dtype))
    torch.testing.assert_close(ours_loss, theirs_loss.float(), rtol=1e-5, atol=1e-5)
    against_megatron = [squared_error_and_norm(a, e)
                        for a, e in zip(ours.grad.split(rows), theirs.grad.split(rows), strict=True)]
    assert pooled_relative_error(against_megatron) <= GRAD_TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [1e4, -1e4])
def test_compiled_cross_entropy_kernels_at_large_fp32_logits_keep_fp32_precision(offset):
    """Qwen3.5's vocabulary over TP 8 (31,040 columns), 512 tokens, logits around +-1e4 in fp32."""
    check_large_logits(*large_logits(512, 248320 // 8, offset, fresh_seed()), device="cuda")


def test_every_collective_goes_to_the_given_tensor_parallel_group(monkeypatch):
    """With a tensor-parallel size of 2 both all-reduces must name the group given: without it they would span every
    rank of the job (other tensor-parallel groups' tokens, or a hang where pipeline stages do not all compute a
    loss), which a test whose world is one tensor-parallel group cannot tell apart. The other rank is simulated as
    holding a slice of -inf logits and no target (its MAX and SUM contributions change nothing), so the loss and
    gradient are still the definition's over this rank's slice."""
    from megatron.oellm.layers import cross_entropy

    group = object()
    groups = []
    monkeypatch.setattr(cross_entropy, "get_pg_rank", lambda g: 0)
    monkeypatch.setattr(cross_entropy, "get_pg_size", lambda g: 2)
    monkeypatch.setattr(cross_entropy.dist, "all_reduce", lambda tensor, op=None, group=None: groups.append(group))
    logits, target, grad_loss = random_case((7, 2), 300, seed=fresh_seed())
    check_against_reference(logits.float(), target, grad_loss, group)
    assert len(groups) == 2 and all(g is group for g in groups)
