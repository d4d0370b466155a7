"""Where this package's Triton kernels run: on CUDA tensors, and on CPU ones when Triton interprets them
(``TRITON_INTERPRET=1``, how the CPU tests exercise the kernels); and on which GPU they launch."""

from __future__ import annotations

import contextlib
import os

import torch
from torch import Tensor


def runs_on(tensor: Tensor) -> bool:
    """Whether the Triton kernels can take ``tensor``: it is on CUDA, or Triton interprets (``TRITON_INTERPRET=1``)."""
    return tensor.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


def on_device(tensor: Tensor) -> contextlib.AbstractContextManager:
    """Make ``tensor``'s GPU the current one while a kernel is launched (Triton launches on the current device); a
    no-op for CPU tensors under the interpreter."""
    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()
