"""A traceback that ends in an exception whose name does not end in ``Error``, ``Exception`` or ``Interrupt``
(triton's ``triton.runtime.errors.OutOfResources``, ``torch._dynamo.exc.BackendCompilerFailed``) was read as one
without an exception line: the row said ``crashed``, or, before slurmstepd's cancellation, named srun's report of the
task rather than the error. Such a name is read with its module (``module.ClassName: message``); a line of ordinary
output (a word and a colon, an enum member) is still no exception line. Fresh random iterations, ranks and sizes."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

STEP_CANCELLED = "slurmstepd: error: *** STEP 1234.0 ON gs01r1b01 CANCELLED AT 2026-11-30T12:10:00 ***"


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return eight_node_strong_args()


def _exceptions() -> dict[str, str]:
    """Name -> the ``Name: message`` line of an exception whose name has none of the usual suffixes."""
    need = random.randint(232449, 400000)
    return {
        "triton.runtime.errors.OutOfResources": f"out of resource: shared memory, Required: {need}, Hardware limit: "
                                                "232448",
        "torch._dynamo.exc.BackendCompilerFailed": f"backend='inductor' raised: KeyError: {need}",
    }


@pytest.mark.parametrize("name", ["triton.runtime.errors.OutOfResources", "torch._dynamo.exc.BackendCompilerFailed"])
@pytest.mark.parametrize("stopped", [False, True], ids=["no stop line", "step cancelled"])
def test_the_exception_is_named_by_its_module_and_class(args, name, stopped):
    rank = random.randrange(32)
    label = f"{rank // 4}: [rank{rank}]:"
    message = _exceptions()[name]
    traceback = [f"{label} Traceback (most recent call last):",
                 f'{label}   File "/opt/megatron/oellm/layers/rmsnorm.py", line 120, in forward',
                 f"{label}     kernel[grid](x, w, y)"]
    ending = [f"srun: error: gs01r1b0{rank // 4}: task {rank // 4}: Exited with exit code 1",
              *([STEP_CANCELLED] if stopped else [])]
    noise = f"{label} Using attention backend: AttnBackend.FLASH"
    log = parse_log_text(log_then(args, random.randint(1, 40), [*traceback, noise, f"{label} {name}: {message}",
                                                                *ending]))
    shown = f"{name}: {message}"
    assert log.runs[-1].failure == f"crashed ({shown if len(shown) <= 80 else shown[:77] + '...'})"
    cut_short = parse_log_text(log_then(args, random.randint(1, 40), [*traceback, noise]))
    assert cut_short.runs[-1].failure == "crashed"
