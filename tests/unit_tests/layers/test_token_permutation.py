"""The MoE token moves of ``megatron.oellm.layers.token_permutation`` against the float64 definition: the fp32
``index_add_`` path on the CPU, the Triton kernel in Triton's interpreter on the CPU, and the compiled kernel on the GPU
at Qwen3.5's shape, where megatron-core's atomic bf16 add measured in the same test is the bar to reach."""

from pathlib import Path

import pytest
import torch

from megatron.oellm.layers import token_permutation
from megatron.oellm.layers.token_permutation import (
    gather_rows,
    scatter_sum_rows,
    sum_rows_by_index,
    sum_rows_reference,
)
from tests.unit_tests.models.hf_reference import fresh_seed
from tests.unit_tests.triton_interpreter import INTERPRETING, assert_pass_in_the_interpreter, skip_when_interpreting

TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 8e-3 if INTERPRETING else 4e-3}
"""Relative L2 error allowed: fp32 round-off, or one bf16 rounding of each element (at most 2**-8 = 3.9e-3 relative
to it, round to nearest). Triton's interpreter stores fp32 as bf16 by truncation (the kernel's rows are exactly the
truncated fp32 sums), up to 2**-7 = 7.8e-3 per element: up to 3.8e-3 over 20,000 draws of the (200, 64, 16) case
(99.9th percentile 3.1e-3), too close to 4e-3. A kernel that rounds after every add (truncating, as the interpreter
does) gives 1.0e-2 or more on the two larger cases, beyond the interpreter's bound."""


def relative_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative L2 error of ``actual`` against ``expected``, in float64."""
    expected = expected.double()
    return float((actual.double() - expected).norm() / expected.norm())


def random_routing(num_tokens: int, rows: int, columns: int, dtype: torch.dtype, seed: int, device: str = "cpu"):
    """``(row values, index)``: ``rows`` rows with random token ids, so some tokens own many rows and some none."""
    generator = torch.Generator(device=device).manual_seed(seed)
    index = torch.randint(0, num_tokens, (rows,), generator=generator, device=device)
    index[: rows // 4] = 3  # one token owns a quarter of the rows
    index = index[torch.randperm(rows, generator=generator, device=device)]
    values = torch.randn(rows, columns, generator=generator, device=device).to(dtype)
    return values, index


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("num_tokens", "rows", "columns"), [(40, 120, 48), (9, 50, 1030), (200, 64, 16)])
def test_sum_rows_by_index_matches_the_definition(dtype, num_tokens, rows, columns):
    """Ragged rows per token (none for many of the 200 tokens), a width over one kernel block (1030 > 1024); on the
    CPU this is the fp32 ``index_add_`` path, under ``TRITON_INTERPRET=1`` the kernel."""
    values, index = random_routing(num_tokens, rows, columns, dtype, fresh_seed())
    expected = sum_rows_reference(values, index, num_tokens)
    actual = sum_rows_by_index(values, index, num_tokens)
    assert actual.dtype == dtype and actual.shape == (num_tokens, columns)
    assert relative_l2(actual, expected) < TOLERANCE[dtype]
    empty = torch.ones(num_tokens, dtype=torch.bool)
    empty[index] = False
    assert actual[empty].abs().sum() == 0 and (num_tokens < rows or empty.any())


def test_gather_and_scatter_sum_are_each_others_adjoint_with_the_definitions_gradients():
    """``gather_rows`` copies exactly and its input gradient is the per-token sum; ``scatter_sum_rows`` sums and its
    input gradient is the gather, both against float64 autograd of the plain definitions."""
    values, index = random_routing(30, 90, 24, torch.float32, fresh_seed())
    tokens = torch.randn(30, 24, dtype=torch.float64).float().requires_grad_()
    gathered = gather_rows(tokens, index)
    torch.testing.assert_close(gathered, tokens.detach().index_select(0, index), rtol=0, atol=0)
    gathered.backward(values)
    assert relative_l2(tokens.grad, sum_rows_reference(values, index, 30)) < TOLERANCE[torch.float32]

    rows = values.clone().requires_grad_()
    summed = scatter_sum_rows(rows, index, 30)
    upstream = torch.randn(30, 24)
    summed.backward(upstream)
    assert relative_l2(summed, sum_rows_reference(values, index, 30)) < TOLERANCE[torch.float32]
    torch.testing.assert_close(rows.grad, upstream.index_select(0, index), rtol=0, atol=0)


def test_second_derivatives_and_float64_gradients_are_exact():
    """Each backward is the other operation, so a second derivative has a graph (on the kernel's path too), and
    fp64 rows are summed in fp64 (gradcheck's finite differences need it)."""
    index = torch.tensor([2, 0, 2, 1, 2, 0], dtype=torch.int32)
    tokens = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda x: gather_rows(x, index.long()), (tokens,))
    torch.autograd.gradcheck(lambda x: scatter_sum_rows(x, index, 4), (torch.randn(6, 3, dtype=torch.float64,
                                                                                    requires_grad=True),))
    x = tokens.detach().float().requires_grad_()
    (grad,) = torch.autograd.grad(gather_rows(x, index.long()).pow(2).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), x)
    rows_per_token = torch.bincount(index.long(), minlength=4).float()[:, None]
    torch.testing.assert_close(grad, 2 * rows_per_token * x)
    torch.testing.assert_close(second, 2 * rows_per_token.expand_as(x))


def test_empty_inputs_and_int32_ids():
    """No rows: every token's sum is zero; no tokens: an empty result; int32 token ids: the float64 definition's
    sums, and the same as with int64 ids."""
    nothing = sum_rows_by_index(torch.randn(0, 5), torch.zeros(0, dtype=torch.long), 3)
    assert nothing.shape == (3, 5) and nothing.abs().sum() == 0
    assert sum_rows_by_index(torch.randn(4, 5), torch.zeros(4, dtype=torch.long), 0).shape == (0, 5)
    values, index = random_routing(7, 30, 6, torch.float32, fresh_seed())
    int32_sums = sum_rows_by_index(values, index.int(), 7)
    assert relative_l2(int32_sums, sum_rows_reference(values, index, 7)) < TOLERANCE[torch.float32]
    torch.testing.assert_close(int32_sums, sum_rows_by_index(values, index, 7), rtol=0, atol=0)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"rows \[n, columns\] and an index \[n\]; got \(5, 4\) and \(6,\)"):
        sum_rows_by_index(torch.randn(5, 4), torch.zeros(6, dtype=torch.long), 3)


def test_the_kernel_runs_exactly_when_expected(monkeypatch):
    """CPU tensors take the fp32 ``index_add_`` unless Triton interprets."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not token_permutation._use_kernel(torch.zeros(1, 1))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert token_permutation._use_kernel(torch.zeros(1, 1))


@skip_when_interpreting
def test_the_triton_kernel_passes_the_same_tests_in_the_interpreter():
    """This module's CPU tests and those of the permutation patch (megatron-core's own permute / unpermute as the
    reference) once more, with ``TRITON_INTERPRET=1``: the kernel runs instead of ``index_add_``."""
    assert_pass_in_the_interpreter(__file__, Path(__file__).parents[1] / "patches" / "test_moe_permutation.py")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_kernel_at_qwen3_5_shape_is_deterministic_and_as_close_as_the_atomic_add(dtype):
    """32,768 tokens x top 8 rows of hidden 2048 (Qwen3.5's MoE layer at MBS 8): within the tolerance, no further
    from float64 than megatron-core's ``scatter_add_`` in the same dtype, and bit-identical when run twice."""
    num_tokens, top_k = 32768, 8
    generator = torch.Generator(device="cuda").manual_seed(fresh_seed())
    index = torch.argsort(torch.rand(num_tokens * top_k, generator=generator, device="cuda")) % num_tokens
    values = torch.randn(num_tokens * top_k, 2048, generator=generator, device="cuda").to(dtype)
    expected = sum_rows_reference(values, index, num_tokens)
    ours = sum_rows_by_index(values, index, num_tokens)
    atomic = torch.zeros(num_tokens, 2048, dtype=dtype, device="cuda").scatter_add_(
        0, index[:, None].expand(-1, 2048), values)
    ours_error, atomic_error = relative_l2(ours, expected), relative_l2(atomic, expected)
    print(f"\nsum_rows {dtype}: ours {ours_error:.3e}, scatter_add_ {atomic_error:.3e}")
    assert ours_error < TOLERANCE[dtype] and ours_error <= atomic_error + 1e-7
    assert torch.equal(ours, sum_rows_by_index(values, index, num_tokens))


@pytest.mark.gpu
def test_the_compiled_kernel_past_int32_offsets_matches_the_definition():
    """2**31 + 131,072 bf16 row elements (hidden 2048), about one row per token: the last rows read and the last
    tokens written lie past int32 offsets; the tokens owning them are checked against the float64 definition."""
    rows, columns, last = 2**31 // 2048 + 64, 2048, 256
    num_tokens = rows - 8  # eight tokens own two rows
    generator = torch.Generator(device="cuda").manual_seed(fresh_seed())
    index = torch.randperm(rows, generator=generator, device="cuda") % num_tokens
    values = torch.randn(rows, columns, generator=generator, device="cuda", dtype=torch.bfloat16)
    actual = sum_rows_by_index(values, index, num_tokens)[-last:]
    owned = index >= num_tokens - last
    expected = sum_rows_reference(values[owned], index[owned] - (num_tokens - last), last)
    assert relative_l2(actual, expected) < TOLERANCE[torch.bfloat16]


def test_non_contiguous_rows_are_summed_as_their_values():
    """Rows that are a strided view (every other column of a wider tensor, as a gradient or a slice can arrive) give
    the definition's sums: the kernel indexes rows as ``row * columns``, so it must be handed a contiguous copy."""
    wide, index = random_routing(11, 60, 2 * 40, torch.float32, fresh_seed())
    rows = wide[:, ::2]
    assert not rows.is_contiguous()
    assert relative_l2(sum_rows_by_index(rows, index, 11), sum_rows_reference(rows, index, 11)) < TOLERANCE[
        torch.float32]
