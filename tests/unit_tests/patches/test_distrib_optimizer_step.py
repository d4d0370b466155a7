"""The TE-free distributed-optimizer patch, on megatron-core's own methods.

No Apex/TE on the CPU machine, so upstream takes the branches that keep Adam's ``step`` in torch's per-parameter
state. Each test runs upstream's real ``DistributedOptimizer`` methods on a bare instance around a torch Adam,
with just the attributes those methods read. The patch keeps upstream's methods reachable behind one wrapper layer
with upstream's signatures.
"""

import inspect
from types import SimpleNamespace

import pytest
import torch

from megatron.oellm.patches import distrib_optimizer_step
from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release
from tests.unit_tests.patches.upstream import unpatched

distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")
pytestmark = pytest.mark.skipif(
    distrib_optimizer.HAVE_APEX_OR_TE or megatron_core_release() != PATCHED_RELEASE,
    reason="the patch targets megatron-core 0.19.2 without Apex/TE",
)
PATCHED_METHODS = ("state_dict", "load_state_dict", "_set_main_param_and_optimizer_states")
Optimizer = distrib_optimizer.DistributedOptimizer


@pytest.fixture
def upstream():
    """Upstream's methods, installed for the test even where the patch was applied earlier in this process; the
    methods found before the test are restored afterwards."""
    found = {name: getattr(Optimizer, name) for name in PATCHED_METHODS}
    originals = {name: unpatched(method) for name, method in found.items()}
    for name, method in originals.items():
        setattr(Optimizer, name, method)
    yield originals
    for name, method in found.items():
        setattr(Optimizer, name, method)


def bare_optimizer() -> tuple[object, torch.optim.Adam, list[torch.nn.Parameter]]:
    """A DistributedOptimizer shell around a torch Adam over two random parameters."""
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    adam = torch.optim.Adam(params, lr=1e-3)
    shell = object.__new__(Optimizer)
    shell.optimizer, shell.grad_scaler = adam, None
    shell.ddp_config = SimpleNamespace(use_megatron_fsdp=False)
    shell.config = SimpleNamespace(fp16=False, use_precision_aware_optimizer_no_fp8_or_ds_fp8=False)
    shell.model_param_group_index_map = {param: (0, i) for i, param in enumerate(params)}
    return shell, adam, params


def adam_steps(adam: torch.optim.Adam, params: list[torch.nn.Parameter], count: int) -> None:
    for _ in range(count):
        for param in params:
            param.grad = torch.randn_like(param)
        adam.step()


def test_upstream_template_fails_before_the_first_step(upstream):
    shell, _, _ = bare_optimizer()
    with pytest.raises(AssertionError):
        upstream["state_dict"](shell)


def test_template_before_the_first_step_leaves_adam_untouched(upstream):
    assert distrib_optimizer_step.apply()
    assert distrib_optimizer_step.apply()  # idempotent
    shell, adam, params = bare_optimizer()
    adam.state[params[0]]  # a read of the defaultdict state must not count as state
    state = Optimizer.state_dict(shell)
    assert [group["step"] for group in state["optimizer"]["param_groups"]] == [0.0]
    assert not any("step" in state for state in adam.state.values())  # the template step was removed
    adam_steps(adam, params, 2)
    after = Optimizer.state_dict(shell)  # real state: upstream's path
    assert [group["step"] for group in after["optimizer"]["param_groups"]] == [2.0]


def test_template_never_replaces_a_state_without_step(upstream):
    """An optimizer whose state holds no ``step`` (Lion's ``exp_avg``; SGD's momentum stands in for it) keeps its
    state: the template is only for an optimizer without any state, and upstream's ``KeyError`` stays."""
    assert distrib_optimizer_step.apply()
    shell, _, params = bare_optimizer()
    sgd = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    shell.optimizer = sgd
    for param in params:
        param.grad = torch.randn_like(param)
    sgd.step()
    momentum = {param: sgd.state[param]["momentum_buffer"].clone() for param in params}
    with pytest.raises(KeyError, match="step"):
        Optimizer.state_dict(shell)
    for param in params:
        assert list(sgd.state[param]) == ["momentum_buffer"]
        torch.testing.assert_close(sgd.state[param]["momentum_buffer"], momentum[param], rtol=0, atol=0)


def test_load_restores_the_checkpoint_step_per_parameter(upstream):
    assert distrib_optimizer_step.apply()
    saved_shell, saved_adam, saved_params = bare_optimizer()
    adam_steps(saved_adam, saved_params, 3)
    checkpoint = Optimizer.state_dict(saved_shell)

    shell, adam, params = bare_optimizer()
    adam_steps(adam, params, 1)  # state exists (the template of a real resume allocates it the same way)
    Optimizer.load_state_dict(shell, checkpoint)
    steps = [adam.state[param]["step"] for param in params]
    assert [step.item() for step in steps] == [3.0, 3.0]
    assert steps[0] is not steps[1]  # upstream shares one tensor, which Adam then increments per parameter
    adam_steps(adam, params, 1)
    assert [adam.state[param]["step"].item() for param in params] == [4.0, 4.0]


def test_upstream_load_shares_one_step_tensor(upstream):
    saved_shell, saved_adam, saved_params = bare_optimizer()
    adam_steps(saved_adam, saved_params, 3)
    checkpoint = upstream["state_dict"](saved_shell)
    shell, adam, params = bare_optimizer()
    adam_steps(adam, params, 1)
    upstream["load_state_dict"](shell, checkpoint)
    adam_steps(adam, params, 1)
    assert adam.state[params[0]]["step"].item() == 5.0  # 3 + one increment per parameter: the bug the patch fixes


def test_parameter_state_load_copies_everything_but_the_step(upstream):
    assert distrib_optimizer_step.apply()
    shell, adam, params = bare_optimizer()
    adam_steps(adam, params, 2)
    loaded = {"param": torch.randn(3, 4), "exp_avg": torch.randn(3, 4), "exp_avg_sq": torch.rand(3, 4),
              "step": torch.tensor(0.0)}
    with torch.no_grad():  # as in upstream's load path
        Optimizer._set_main_param_and_optimizer_states(shell, params[0], loaded)
    state = adam.state[params[0]]
    torch.testing.assert_close(params[0].detach(), loaded["param"], rtol=0, atol=0)
    torch.testing.assert_close(state["exp_avg"], loaded["exp_avg"], rtol=0, atol=0)
    assert state["step"].item() == 2.0
    without_step = {key: value for key, value in loaded.items() if key != "step"}  # fully_reshardable buckets
    with torch.no_grad():
        Optimizer._set_main_param_and_optimizer_states(shell, params[0], without_step)  # no KeyError
    assert state["step"].item() == 2.0


def test_upstream_parameter_state_load_overwrites_the_step(upstream):
    shell, adam, params = bare_optimizer()
    adam_steps(adam, params, 2)
    loaded = {"param": torch.randn(3, 4), "exp_avg": torch.randn(3, 4), "exp_avg_sq": torch.rand(3, 4),
              "step": torch.tensor(0.0)}
    with torch.no_grad():
        upstream["_set_main_param_and_optimizer_states"](shell, params[0], loaded)
    assert adam.state[params[0]]["step"].item() == 0.0  # the bug the patch fixes


def test_other_release_keeps_upstream(upstream, monkeypatch):
    monkeypatch.setattr(distrib_optimizer_step, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning, match="0.20.0 is not 0.19.2"):
        assert not distrib_optimizer_step.apply()
    assert all(getattr(Optimizer, name) is method for name, method in upstream.items())


def test_apex_or_te_keeps_upstream(upstream, monkeypatch):
    """With Apex or Transformer Engine, upstream keeps Adam's step in the param groups (the bug the patch fixes
    cannot occur): on the patched release too, its methods stay as they are, without a warning."""
    monkeypatch.setattr(distrib_optimizer_step, "megatron_core_release", lambda: PATCHED_RELEASE)
    monkeypatch.setattr(distrib_optimizer, "HAVE_APEX_OR_TE", True)
    assert distrib_optimizer_step.apply() is False
    assert all(getattr(Optimizer, name) is method for name, method in upstream.items())


def test_the_optimizer_patch_keeps_upstreams_methods_reachable():
    distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")
    cls = distrib_optimizer.DistributedOptimizer
    names = ("state_dict", "load_state_dict", "_set_main_param_and_optimizer_states")
    found = {name: getattr(cls, name) for name in names}
    upstream = {name: unpatched(method) for name, method in found.items()}
    try:
        for name, method in upstream.items():
            setattr(cls, name, method)
        if not distrib_optimizer_step.apply():
            pytest.skip("the patch does not apply here")
        assert distrib_optimizer_step.apply()  # idempotent
        for name, method in upstream.items():
            assert getattr(cls, name).oellm_patched and unpatched(getattr(cls, name)) is method
            assert getattr(cls, name).__wrapped__ is method  # one layer
            ours = inspect.signature(getattr(cls, name), follow_wrapped=False)
            assert list(ours.parameters) == list(inspect.signature(method).parameters)
    finally:
        for name, method in found.items():
            setattr(cls, name, method)
