"""Run a launcher (torchrun) as a child that stops the way it means to when the user interrupts.

``subprocess.run`` answers Ctrl-C by killing its child 0.25 s later. torchrun, killed that way, cannot stop its
ranks: they run in sessions of their own, keep the GPUs and, blocked in a collective, never end. Here the child runs
in a session of its own (so a terminal's Ctrl-C reaches it once, from us, not twice), each SIGINT, SIGTERM or SIGHUP
we get is passed on to it, and we wait until it has ended: torchrun then signals its ranks and kills those still
running after its shutdown timeout.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from megatron.oellm.signal_handlers import STOPPING_SIGNALS, handling


def run_forwarding_signals(command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` to its end, passing on the :data:`STOPPING_SIGNALS` we receive meanwhile; its return code
    (``-N`` when a signal ended it), or ``128 + N`` for the first signal N we passed on, as a shell reports an
    interrupted command. A line on stderr says that the child was signalled and is being waited for."""
    received: list[int] = []
    children: list[subprocess.Popen] = []

    def pass_on(signum: int, _frame: object) -> None:
        received.append(signum)
        if children:
            _signal_child(children[0], signum, command[0])

    with handling(STOPPING_SIGNALS, pass_on):
        children.append(subprocess.Popen(list(command), env=None if env is None else dict(env),
                                         start_new_session=True))
        for signum in received:  # arrived while the child was starting
            _signal_child(children[0], signum, command[0])
        returncode = children[0].wait()
    return 128 + received[0] if received else returncode


def _signal_child(child: subprocess.Popen, signum: int, name: str) -> None:
    """Send ``signum`` to ``child`` and say so on stderr (the user waits for it to stop, maybe for tens of
    seconds)."""
    print(f"{signal.Signals(signum).name}: passed on to {name} (pid {child.pid}); waiting for it to stop its "
          "processes", file=sys.stderr, flush=True)
    child.send_signal(signum)


def exit_status(returncode: int) -> int:
    """The shell's exit status of a child that returned ``returncode``: a child killed by signal N (subprocess's
    ``-N``) becomes ``128 + N`` as a shell reports it (137 for SIGKILL, e.g. the OOM killer); ``sys.exit(-9)``
    would exit 247."""
    return 128 - returncode if returncode < 0 else returncode
