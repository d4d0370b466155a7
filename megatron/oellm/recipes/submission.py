"""Queueing a job script: its run directory (SLURM opens the job log there before the script runs), a new
``job.sbatch`` (``job-N.sbatch`` beside an earlier submission's), and ``sbatch``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from megatron.oellm.recipes.config import RecipeError


def prepare_run_dir(directory: Path) -> None:
    """Create the run directory ``directory`` (SLURM opens the job log there before the script runs); a directory
    that cannot be created (a file in the way, no permission) is a :class:`RecipeError` naming ``--output-dir``."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RecipeError(f"cannot create the run directory {str(directory)!r} ({error.strerror or error}); pass "
                          "--output-dir DIR (or set cluster.output_dir) to a directory you can write") from error


def _new_script(directory: Path, script: str) -> Path:
    """Write ``script`` to ``job.sbatch`` in ``directory``, or to ``job-<N>.sbatch`` (smallest free N >= 2) when an
    earlier submission's script is there; an existing script is never overwritten."""
    prepare_run_dir(directory)
    number = 1
    while True:
        path = directory / ("job.sbatch" if number == 1 else f"job-{number}.sbatch")
        try:
            with path.open("x") as file:
                file.write(script)
        except FileExistsError:
            number += 1
            continue
        except OSError as error:
            raise RecipeError(f"cannot write the job script {str(path)!r} ({error.strerror or error}); pass "
                              "--output-dir DIR (or set cluster.output_dir) to a directory you can write") from error
        return path


def sbatch_command() -> str:
    """Path of ``sbatch`` on PATH; RecipeError naming the fix when there is none (checked before any run directory
    is created, so a submission from a machine without SLURM leaves nothing behind)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise RecipeError("sbatch not found: submit from a SLURM login node, or use --dry-run to print the script")
    return sbatch


def submit(script: str, directory: Path) -> str:
    """Write ``script`` to a new job script in ``directory`` (see :func:`_new_script`), submit it with ``sbatch``;
    return sbatch's output."""
    sbatch = sbatch_command()
    path = _new_script(directory, script)
    done = subprocess.run([sbatch, str(path)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RecipeError(f"sbatch {path} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()
