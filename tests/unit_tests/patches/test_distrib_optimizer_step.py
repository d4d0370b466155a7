"""The TE-free distributed-optimizer patch: a load template before the first step, state untouched afterwards.

Runs megatron-core's own ``DistributedOptimizer.state_dict`` (no Apex/TE on the CPU machine, so upstream takes the
branch that reads ``step`` from the per-parameter state) on a bare instance holding a real torch Adam.
"""

import pytest
import torch

from megatron.oellm.patches import distrib_optimizer_step
from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release

distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")
pytestmark = pytest.mark.skipif(
    distrib_optimizer.HAVE_APEX_OR_TE or megatron_core_release() != PATCHED_RELEASE,
    reason="the patch targets megatron-core 0.19.2 without Apex/TE",
)


@pytest.fixture
def upstream_state_dict():
    original = distrib_optimizer.DistributedOptimizer.state_dict
    yield original
    distrib_optimizer.DistributedOptimizer.state_dict = original


def bare_optimizer() -> tuple[object, torch.optim.Adam, list[torch.nn.Parameter]]:
    """A DistributedOptimizer shell around a torch Adam over two random parameters (nothing else is read)."""
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    adam = torch.optim.Adam(params, lr=1e-3)
    shell = object.__new__(distrib_optimizer.DistributedOptimizer)
    shell.optimizer, shell.grad_scaler = adam, None
    return shell, adam, params


def test_upstream_fails_before_the_first_step(upstream_state_dict):
    shell, _, _ = bare_optimizer()
    with pytest.raises(AssertionError):
        upstream_state_dict(shell)


def test_patched_template_before_the_first_step_leaves_adam_untouched(upstream_state_dict):
    assert distrib_optimizer_step.apply()
    assert distrib_optimizer_step.apply()  # idempotent
    shell, adam, params = bare_optimizer()
    state = distrib_optimizer.DistributedOptimizer.state_dict(shell)
    assert [group["step"] for group in state["optimizer"]["param_groups"]] == [0.0]
    assert len(adam.state) == 0  # lazily initialised by the first real step, as without the patch
    for param in params:
        param.grad = torch.randn_like(param)
    adam.step()
    adam.step()
    after = distrib_optimizer.DistributedOptimizer.state_dict(shell)  # real state: upstream's path
    assert [group["step"] for group in after["optimizer"]["param_groups"]] == [2.0]


def test_other_release_keeps_upstream(upstream_state_dict, monkeypatch):
    monkeypatch.setattr(distrib_optimizer_step, "megatron_core_release", lambda: "0.20.0")
    assert not distrib_optimizer_step.apply()
    assert distrib_optimizer.DistributedOptimizer.state_dict is upstream_state_dict
