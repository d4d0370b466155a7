"""Environment doctor: which versions are installed, which GPUs are seen, and which known-bad combinations apply.

The work is split so that every rule can be tested without the hardware it is about:

* :func:`collect_environment` probes this process once into an :class:`EnvironmentReport` (package versions from
  distribution metadata, modules located with ``importlib.util.find_spec`` without importing them; only torch is
  imported, for its CUDA build and the GPUs; what may fail to import, Transformer Engine among them, is imported in
  a fresh interpreter);
* :func:`check_environment` runs each known-bad rule, a pure function of the report and an environment-variable
  mapping, and returns :class:`Finding` s;
* :func:`format_text` / :func:`to_json` render them and :func:`exit_status` turns them into the exit status.

Where each part lives:

* :mod:`megatron.oellm.doctor.report`: the report and finding dataclasses, the exit status, the text and JSON output;
* :mod:`megatron.oellm.doctor.probes`: :func:`collect_environment` and its probes (megatron-oellm's version and
  folder, package versions, torch's CUDA build and GPUs, the GPUs nvidia-smi lists, fresh-interpreter imports, nvcc,
  megatron-core's folder, deep_ep's HybridEP);
* :mod:`megatron.oellm.doctor.locate`: modules, packages and files located without importing them;
* :mod:`megatron.oellm.doctor.nccl`: the NCCL channel rule and the ``NCCL_*`` name scan and rule;
* :mod:`megatron.oellm.doctor.allocator`: the ``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF`` rule;
* :mod:`megatron.oellm.doctor.rules`: every other rule, :data:`RULES` (all of them, in report order) and
  :func:`check_environment`.

Importing this package imports neither torch nor megatron-core.
"""

from megatron.oellm.doctor.probes import PACKAGE_PROBES, collect_environment, deep_ep_declares_hybrid_ep
from megatron.oellm.doctor.report import EnvironmentReport, Finding, GpuInfo, exit_status, format_text, to_json
from megatron.oellm.doctor.rules import RULES, check_environment

__all__ = [
    "EnvironmentReport",
    "Finding",
    "GpuInfo",
    "PACKAGE_PROBES",
    "RULES",
    "check_environment",
    "collect_environment",
    "deep_ep_declares_hybrid_ep",
    "exit_status",
    "format_text",
    "to_json",
]
