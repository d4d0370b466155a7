"""Packages megatron-core 0.19.2 imports only when a flag asks for them, checked on the node before Megatron starts.

megatron-core lists these packages in its ``dev`` extra only, so a container may lack them, and megatron imports each
late: the Weights & Biases writer inside argument validation on the last rank only (the other ranks then wait at
initialisation), the local non-persistent checkpoint manager once the process groups are up, the persistent
asynchronous checkpoint worker at initialisation, the emerging optimizers after the model is built. The training
entry runs these checks on its node (``oellm recipe`` on a login node does not: the login node's packages are not the
container's).
"""

from __future__ import annotations

import argparse

from megatron.oellm.doctor.locate import module_findable

NODE_PACKAGE_FLAGS = (
    ("--log-straggler", "log_straggler", "nvidia-ml-py", "pynvml",
     "megatron-core 0.19.2's straggler report reads GPU temperatures through it and stops every rank with a "
     "ModuleNotFoundError at the first log interval"),
    ("--log-energy", "log_energy", "nvidia-ml-py", "pynvml",
     "megatron-core 0.19.2's energy monitor reads GPU energy through it and logs 0 J and 0 W every interval "
     "without it"),
    ("--enable-ft-package", "enable_ft_package", "nvidia-resiliency-ext", "nvidia_resiliency_ext.fault_tolerance",
     "megatron-core 0.19.2 imports its fault-tolerance client when training starts and stops there"),
    ("--inprocess-restart", "inprocess_restart", "nvidia-resiliency-ext", "nvidia_resiliency_ext.inprocess",
     "megatron-core 0.19.2's in-process restart wrapper is built from it"),
)
"""(flag, argument, package, module megatron imports, what happens without it) for flags megatron-core 0.19.2 serves
with a package it imports only once the run is under way."""


def check_parsed_packages(parsed: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--wandb-project`` without the ``wandb`` package: megatron-core 0.19.2 imports it
    when it sets up the run's writers (``set_global_variables``), on the last rank only, which stops there with an
    ``ImportError`` while the other ranks wait for it at initialisation. Runs on the parsed command line."""
    if parsed.wandb_project and not module_findable("wandb"):
        raise ValueError(f"--wandb-project {parsed.wandb_project}: the wandb package is not installed in this "
                         "environment; megatron-core 0.19.2 imports it when it sets up the run, on the last "
                         "rank only, which stops with an ImportError while the other ranks wait; install wandb or "
                         "drop --wandb-project")


def check_validated_packages(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for validated ``args`` that need a package this environment lacks: an optimizer other
    than adam or sgd without ``emerging-optimizers`` >= 0.2 (megatron-core's own test of it,
    ``megatron.core.optimizer.HAVE_EMERGING_OPTIMIZERS``; it fails after the model is built), ``--async-save`` whose
    strategy megatron-core cannot load (``nvrx``, the default, needs ``nvidia-resiliency-ext``; megatron-core's own
    loader is asked), which it loads when it starts the persistent checkpoint worker at initialisation, or else at
    the first save (a run without ``--save`` never loads it), ``--non-persistent-ckpt-type local`` without
    ``nvidia-resiliency-ext`` (it fails once the process groups are up), and the flags of
    :data:`NODE_PACKAGE_FLAGS` without their package."""
    from megatron.core import optimizer
    from megatron.core.dist_checkpointing.strategies.torch import get_async_strategy

    if args.optimizer not in ("adam", "sgd") and not optimizer.HAVE_EMERGING_OPTIMIZERS:
        raise ValueError(f"--optimizer {args.optimizer} needs the emerging-optimizers package (0.2 or later), which "
                         "is not installed in this environment: megatron-core 0.19.2 stops with an ImportError after "
                         "building the model on every rank; install emerging-optimizers or use --optimizer adam")
    if args.async_save and (args.use_persistent_ckpt_worker or args.save):
        try:
            get_async_strategy(args.async_strategy)
        except ImportError as error:
            raise ValueError(f"--async-save with --async-strategy {args.async_strategy}: megatron-core 0.19.2 cannot "
                             f"load that strategy in this environment ({error}) and stops there when it initialises or "
                             "first saves; add --async-strategy mcore or install nvidia-resiliency-ext") from error
    for flag, asked, package, module, consequence in NODE_PACKAGE_FLAGS:
        if getattr(args, asked) and not module_findable(module):
            raise ValueError(f"{flag} needs the {package} package, which is not installed in this environment: "
                             f"{consequence}; install {package} or drop {flag}")
    if args.non_persistent_ckpt_type == "local" and not module_findable(
            "nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager"):
        raise ValueError("--non-persistent-ckpt-type local needs the nvidia-resiliency-ext package, which is not "
                         "installed in this environment: megatron-core 0.19.2 stops with a RuntimeError once the "
                         "process groups are up; install nvidia-resiliency-ext or use --non-persistent-ckpt-type "
                         "global")
