"""examples/oellm/main.sh picks the GPU or the CPU job before anything is installed, in ``${PYTHON:-python3}``.

The script runs in a copy of its tree whose ``tools/install.sh`` and recipe wrappers are stand-ins that record how
they were called; ``nvidia-smi`` and the interpreter are stand-ins too, so no package is installed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

RECORDER = '#!/bin/sh\necho "{name} $* PYTHON=${{PYTHON:-}}${{RECORD_PWD:+ PWD=$(pwd)}}" >> "$RECORD"\n'


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def run_main(tmp_path: Path, nvidia_smi: str | None, torch_sees_gpu: bool, smi_script: str | None = None,
             args: tuple[str, ...] = ("--extra",), cwd: Path | None = None, link: Path | None = None,
             shell_pwd: Path | None = None) -> list[str]:
    """Run a copy of main.sh with ``args`` and the stand-ins; return the recorded calls, one per line (with the
    directory each ran in when ``cwd``, the caller's directory, is given). ``nvidia-smi`` prints ``nvidia_smi``, or
    runs ``smi_script`` (a shell script) when given. ``link``: run it through a symbolic link made there.
    ``shell_pwd``: the caller's shell's ``PWD`` (a symbolic link to ``cwd`` it changed into)."""
    root = tmp_path / "tree"
    (root / "examples" / "oellm").mkdir(parents=True)
    shutil.copy(EXAMPLES / "main.sh", root / "examples" / "oellm" / "main.sh")
    _executable(root / "tools" / "install.sh", RECORDER.format(name="install"))
    for stem in ("qwen3_5_35b_a3b_mn5_strong", "qwen3_235b_a22b_jupiter"):
        _executable(root / "examples" / "oellm" / f"{stem}.sh", RECORDER.format(name=stem))
    bin_dir = tmp_path / "bin"
    for tool in ("bash", "dirname", "grep", "readlink", "sh"):
        _executable(bin_dir / tool, f'#!/bin/sh\nexec {shutil.which(tool)} "$@"\n')
    _executable(bin_dir / "python3", RECORDER.format(name="python3"))
    if smi_script is not None:
        _executable(bin_dir / "nvidia-smi", smi_script)
    elif nvidia_smi is not None:
        _executable(bin_dir / "nvidia-smi", f"#!/bin/sh\necho '{nvidia_smi}'\n")
    python = tmp_path / "venv" / "python"
    _executable(python, f'#!/bin/sh\n[ "$1" = -c ] && exit {0 if torch_sees_gpu else 1}\n'
                        + RECORDER.format(name="venv-python"))
    record = tmp_path / "record"
    env = {"PATH": str(bin_dir), "PYTHON": str(python), "RECORD": str(record), "HOME": os.environ.get("HOME", "/")}
    if cwd is not None:
        env["RECORD_PWD"] = "1"
    if shell_pwd is not None:
        env["PWD"] = str(shell_pwd)
    script = root / "examples" / "oellm" / "main.sh"
    if link is not None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(script)
    done = subprocess.run([shutil.which("bash"), str(link or script), *args],
                          env=env, capture_output=True, text=True, check=False, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return record.read_text().splitlines()


def test_a_gpu_that_nvidia_smi_lists_gets_the_gpu_job_before_torch_is_installed(tmp_path):
    """A fresh GPU node without torch took the CPU branch (the check imported torch first)."""
    calls = run_main(tmp_path, "GPU 0: NVIDIA H100 (UUID: GPU-0)", torch_sees_gpu=False)
    python = str(tmp_path / "venv" / "python")
    assert calls == [f"install hf,gdn PYTHON={python}",
                     f"qwen3_5_35b_a3b_mn5_strong --local --row 1 --extra PYTHON={python}"]


@pytest.mark.parametrize("nvidia_smi", [None, "No devices were found"])
def test_no_gpu_gets_the_cpu_job_in_the_chosen_interpreter(tmp_path, nvidia_smi):
    """``python3`` was hard-coded: ``PYTHON=... bash main.sh`` ran ``models`` in another interpreter. The extras are
    the GPU job's (hf,gdn): a login node's run fills a shared environment for the GPU nodes."""
    calls = run_main(tmp_path, nvidia_smi, torch_sees_gpu=False)
    python = str(tmp_path / "venv" / "python")
    assert calls == [f"install hf,gdn PYTHON={python}", f"venv-python -m megatron.oellm models PYTHON={python}",
                     f"qwen3_235b_a22b_jupiter --dry-run --row 1 --extra PYTHON={python}"]


def test_without_nvidia_smi_an_installed_cuda_torch_still_finds_the_gpu(tmp_path):
    calls = run_main(tmp_path, None, torch_sees_gpu=True)
    assert calls[0].startswith("install hf,gdn ") and calls[1].startswith("qwen3_5_35b_a3b_mn5_strong --local")


@pytest.mark.parametrize("status", [0, 6])
def test_a_multi_gpu_listing_gets_the_gpu_job_however_nvidia_smi_ends(tmp_path, status):
    """``nvidia-smi -L | grep -q`` under pipefail: grep left at the first GPU line, nvidia-smi died of SIGPIPE on
    the next one (or exited non-zero over another GPU), and a GPU node ran the CPU job."""
    gpus = random.randint(4, 8)
    lines = "".join(f"echo 'GPU {i}: NVIDIA H100 (UUID: GPU-{i})'; {shutil.which('sleep')} 0.05\n"
                    for i in range(gpus))
    calls = run_main(tmp_path, None, torch_sees_gpu=False, smi_script=f"#!/bin/sh\n{lines}exit {status}\n")
    assert calls[0].startswith("install hf,gdn ") and calls[1].startswith("qwen3_5_35b_a3b_mn5_strong --local")


@pytest.mark.parametrize("listing", ["GPU 0: NVIDIA H100 (UUID: GPU-0)", None])
def test_relative_paths_stay_the_callers(tmp_path, listing):
    """main.sh changed to the repository root before it ran the recipe, so a relative ``--data-path`` (or
    ``--tokenizer-model``) named a path under the checkout, not the caller's corpus."""
    caller = tmp_path / "caller"
    caller.mkdir()
    data = f"corpus{random.randrange(10**6)}/text"
    calls = run_main(tmp_path, listing, torch_sees_gpu=False, args=("--data-path", data), cwd=caller)
    assert all(call.endswith(f" PWD={caller}") for call in calls), calls
    assert f"--data-path {data} " in calls[-1], calls


@pytest.mark.parametrize("listing", ["GPU 0: NVIDIA H100 (UUID: GPU-0)", None])
def test_a_link_to_main_sh_runs_the_checkout_it_points_into(tmp_path, listing):
    """Run through a symbolic link elsewhere, main.sh looked for tools/install.sh and the recipe wrappers two
    folders above the link, and stopped there."""
    link = tmp_path / f"elsewhere{random.randrange(10**6)}" / random.choice(["main.sh", "job.sh"])
    calls = run_main(tmp_path, listing, torch_sees_gpu=False, link=link)
    assert calls[0].startswith("install hf,gdn ") and calls[-1].split()[0] in {"qwen3_5_35b_a3b_mn5_strong",
                                                                             "qwen3_235b_a22b_jupiter"}, calls


CARRIED_NAMES = ["plain", "v1.2_run-a", "x@y+z=w"]
"""Caller directories a job script carries in ``#SBATCH --output`` and the container's ``--bind``."""
UNCARRIED_NAMES = ["dir with space", "it's", "a,b", "x:y", "cost$1", "pct%d", "tab\tname"]
"""Caller directories it cannot carry: the recipe refuses a run directory under them."""


@pytest.mark.parametrize(("name", "moved"), [(name, False) for name in CARRIED_NAMES]
                         + [(name, True) for name in UNCARRIED_NAMES])
def test_the_dry_run_from_a_directory_a_job_script_cannot_carry_keeps_its_runs_under_home(tmp_path, name, moved):
    """Run from a folder with a space, the README's first command ended in the recipe's refusal of the run directory
    (rc 2) instead of the plan; the dry run now puts its run directories under ~/oellm-runs there, and an
    --output-dir given to main.sh comes after (argparse takes the last)."""
    caller = tmp_path / f"{name}{random.randrange(100)}"
    caller.mkdir()
    calls = run_main(tmp_path, None, torch_sees_gpu=False, cwd=caller)
    given = "--output-dir ~/oellm-runs " if moved else ""
    assert calls[-1].startswith(f"qwen3_235b_a22b_jupiter --dry-run --row 1 {given}--extra PYTHON="), calls


def test_the_gpu_job_from_such_a_directory_gets_no_output_dir(tmp_path):
    """``--local`` writes no job script: its checkpoints stay under the caller's directory."""
    caller = tmp_path / f"{random.choice(UNCARRIED_NAMES)}{random.randrange(100)}"
    caller.mkdir()
    calls = run_main(tmp_path, "GPU 0: NVIDIA H100 (UUID: GPU-0)", torch_sees_gpu=False, cwd=caller)
    assert calls[-1].startswith("qwen3_5_35b_a3b_mn5_strong --local --row 1 --extra PYTHON="), calls


def test_an_output_dir_after_main_sh_s_own_wins():
    """main.sh's ``--output-dir ~/oellm-runs`` comes before the caller's arguments: the recipe takes the caller's."""
    from megatron.oellm.commands.recipe import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    mine = f"/data/runs{random.randrange(10**6)}"
    args = parser.parse_args(["x.toml", "--dry-run", "--row", "1", "--output-dir", "~/oellm-runs",
                              *random.choice([[f"--output-dir={mine}"], ["--output-dir", mine]])])
    assert args.output_dir == mine


@pytest.mark.parametrize(("name", "refused"), [(name, False) for name in CARRIED_NAMES]
                         + [(name, True) for name in UNCARRIED_NAMES])
def test_main_sh_s_characters_are_the_ones_the_recipe_refuses(tmp_path, name, refused):
    """main.sh's pattern of carried characters against the recipe's own checks of a run directory: the job log's
    ``#SBATCH --output`` and the container's ``--bind``."""
    from megatron.oellm.recipes.config import RecipeError
    from megatron.oellm.recipes.host_paths import bind_source
    from megatron.oellm.recipes.slurm import _output_directive

    directory = tmp_path / name / "oellm-runs" / f"row{random.randint(1, 99):02d}-64n"
    try:
        _output_directive(directory)
        bind_source(str(directory), "run directory", "")
    except RecipeError:
        assert refused
    else:
        assert not refused


@pytest.mark.parametrize(("physical", "logical", "moved"), [("plain", "with space", False), ("with space", "plain", True)])
def test_the_directory_checked_is_the_physical_one_the_recipe_reads(tmp_path, physical, logical, moved):
    """Changed into through a symbolic link, the shell's ``PWD`` names the link; the recipe's run directory is under
    ``os.getcwd()``, the folder it points to, so that is the one main.sh checks."""
    caller = tmp_path / f"{physical}{random.randrange(100)}"
    caller.mkdir()
    link = tmp_path / f"{logical}{random.randrange(100, 200)}"
    link.symlink_to(caller)
    calls = run_main(tmp_path, None, torch_sees_gpu=False, cwd=link, shell_pwd=link)
    given = "--output-dir ~/oellm-runs " if moved else ""
    assert calls[-1].startswith(f"qwen3_235b_a22b_jupiter --dry-run --row 1 {given}--extra PYTHON="), calls
