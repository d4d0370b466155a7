"""Queueing a job script: its run directory (SLURM opens the job log there before the script runs), a new
``job.sbatch`` (``job-N.sbatch`` beside an earlier submission's; one ``sbatch`` refuses is removed), and ``sbatch``;
before any row is queued, the ``sbatch`` options the cluster requires (:attr:`ClusterSettings.required_options`) and
``sbatch --test-only`` of every row, so a row the site would reject (a QOS node limit) leaves no part of the table
queued.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from megatron.oellm.paths import unwritable_reason
from megatron.oellm.recipes.config import SBATCH_INPUT_VARIABLES, ClusterSettings, RecipeError


def prepare_run_dir(directory: Path) -> None:
    """Create the run directory ``directory`` (SLURM opens the job log there before the script runs); a directory
    that cannot be created (a file in the way, no permission) is a :class:`RecipeError` naming ``--output-dir``, in
    the words of :func:`run_dir_problem` where that foresees it (as a dry run notes it)."""
    problem = run_dir_problem(directory)
    if problem:
        raise RecipeError(problem)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RecipeError(_run_dir_refusal(directory, error.strerror or str(error))) from error


def run_dir_problem(directory: Path) -> str | None:
    """The refusal of run directory ``directory`` where it could not be created and written into, judged without
    creating anything (:func:`~megatron.oellm.paths.unwritable_reason`: a file in the way of it or of a folder above
    it, a read-only mount, no permission): ``--submit`` refuses it, and a dry run notes it; None where it can."""
    reason = unwritable_reason(directory)
    return None if reason is None else _run_dir_refusal(directory, reason)


def _run_dir_refusal(directory: Path, reason: str) -> str:
    """The refusal of run directory ``directory``, which cannot be created for ``reason``."""
    return (f"cannot create the run directory {str(directory)!r} ({reason}); pass --output-dir DIR (or set "
            "cluster.output_dir) to a directory you can write")


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


def sbatch_errors(done: subprocess.CompletedProcess[str]) -> str:
    """The non-empty lines ``sbatch`` wrote to stderr in ``done``, joined by ``; `` (each is a message of its own,
    and a refusal is one line); '' where it wrote none."""
    return "; ".join(line.strip() for line in done.stderr.splitlines() if line.strip())


def submit(script: str, directory: Path) -> str:
    """Write ``script`` to a new job script in ``directory`` (see :func:`_new_script`), submit it with ``sbatch``;
    return sbatch's output. A script ``sbatch`` refuses is removed (:func:`_remove_refused_script`)."""
    sbatch = sbatch_command()
    path = _new_script(directory, script)
    done = subprocess.run([sbatch, str(path)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RecipeError(f"sbatch {path} failed ({done.returncode}): {sbatch_errors(done)}; "
                          f"{_remove_refused_script(path)}")
    return done.stdout.strip()


def _remove_refused_script(path: Path) -> str:
    """Remove the job script ``path`` that ``sbatch`` refused, and say so: it was written for this submission alone
    (:func:`_new_script` never writes over a file), and kept it would take the name of the row's next submission,
    which would then be written as ``job-2.sbatch`` beside a job that never ran. Where it cannot be removed, say that
    it stays and why."""
    try:
        path.unlink()
    except OSError as error:
        return f"{path.name} stays ({error.strerror or error}), though nothing was queued: remove it"
    return f"{path.name} is removed, as nothing was queued (--dry-run prints the script)"


def missing_required_options(cluster: ClusterSettings) -> list[str]:
    """The ``cluster.required_options`` set neither in ``cluster`` (the recipe or its flag) nor by the variable
    ``sbatch`` reads the option from (:data:`SBATCH_INPUT_VARIABLES`) in this process's environment, which the
    ``sbatch`` it starts inherits."""
    return [name for name in cluster.required_options
            if not getattr(cluster, name) and not os.environ.get(SBATCH_INPUT_VARIABLES[name])]


def _options_phrase(names: list[str], form: str) -> str:
    """``names`` as ``A and B`` (``A, B and C``), each written as ``form.format(name)`` (``"--{}"`` gives
    ``--account``)."""
    words = [form.format(name) for name in names]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def required_options_text(cluster: ClusterSettings, names: list[str]) -> str:
    """``--account and --qos, which cluster mn5 requires (or cluster.account ... in the recipe, or SBATCH_ACCOUNT
    ... exported)``: what a submission to ``cluster`` needs, for the dry run's note and the refusal alike."""
    variables = [SBATCH_INPUT_VARIABLES[name] for name in names]
    return (f"{_options_phrase(names, '--{}')}, which cluster {cluster.name} requires (or "
            f"{_options_phrase(names, 'cluster.{}')} in the recipe, or {_options_phrase(variables, '{}')} exported)")


def check_required_options(cluster: ClusterSettings) -> None:
    """Refuse a submission to ``cluster`` without an option it requires (:func:`missing_required_options`), before
    any ``sbatch`` call: without its account or QOS the site rejects every row, or queues it where it was not
    meant to run."""
    missing = missing_required_options(cluster)
    if missing:
        raise RecipeError(f"--submit needs {required_options_text(cluster, missing)}; nothing was submitted")


def image_uri_warning(cluster: ClusterSettings) -> str:
    """A warning (no newline) when ``cluster``'s image is a URI (``docker://...``, ``oras://...``) rather than a
    ``.sif`` file; '' otherwise. The container runtime accepts one, so the job may run, but every node then pulls and
    converts the image at job start, which a compute node without internet access cannot and which costs minutes of
    the job's time."""
    image, runtime = cluster.image, cluster.container_runtime
    if "://" not in image:
        return ""
    return (f"image {image} is a URI: every node pulls and converts it at job start (compute nodes often have no "
            f"internet access); `{runtime} pull IMAGE.sif {image}` (or `{runtime} build`, docs/container.md) on the "
            "login node and pass --image IMAGE.sif")


def sbatch_rejection(script: str) -> str:
    """What ``sbatch --test-only`` says when it would reject the job of ``script`` (given on its standard input, so
    no job script is written for a row that is not submitted): its error lines joined; '' when it would queue it.
    ``--test-only`` checks the job against the account's, QOS's and partition's limits and queues nothing."""
    done = subprocess.run([sbatch_command(), "--test-only"], input=script, capture_output=True, text=True,
                          check=False)
    if not done.returncode:
        return ""
    return sbatch_errors(done) or f"status {done.returncode}"


def check_jobs_would_queue(scripts: Mapping[int, str]) -> None:
    """Refuse the submission when ``sbatch --test-only`` rejects the script of any row (row number -> script),
    naming the first such row with sbatch's message and the other rejected ones, before any row is queued: a row
    over a QOS node limit stopped the submission midway, the earlier rows queued."""
    rejected = {number: message for number, script in scripts.items() if (message := sbatch_rejection(script))}
    if not rejected:
        return
    (first, message), *others = rejected.items()
    also = "" if not others else f" (row{'s' if len(others) > 1 else ''} {', '.join(str(n) for n, _ in others)} too)"
    raise RecipeError(f"sbatch --test-only rejects row {first}{also}: {message}; nothing was submitted: select the "
                      "rows the site accepts (--row N, --nodes N) or pass another --qos, --partition or --account")


def job_id(output: str) -> str:
    """The job id in ``sbatch``'s reply ``Submitted batch job 123``: its last word (``?`` for an empty reply)."""
    words = output.split()
    return words[-1] if words else "?"
