"""A job whose ``apptainer exec`` of the image fails (an image URI a compute node cannot pull, an unreadable file)
said ``image X runs as none (apptainer exec failed), but node is x86_64: build the image for x86_64``, the wrong
cause. It now says the exec failed and quotes the runtime's last error line. ``--image docker://...`` is accepted
(the runtimes take URIs), with a warning to pull or build a ``.sif`` first."""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES, fake_sbatch
from sbatch_job_helpers import APPTAINER, mn5_weak_recipe, run_job

from megatron.oellm.cli import main
from megatron.oellm.recipes import resolve_row, sbatch_text

STRONG = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")


def test_a_failing_exec_is_named_with_the_runtimes_error(tmp_path):
    uri = f"docker://registry.example/megatron-oellm:{random.randint(0, 10**6)}"
    reason = f"FATAL: while making image from oci registry: dial tcp {random.randint(1, 254)}.0.0.1:443: timeout"
    failing = APPTAINER.replace('[ -f "$1" ] ||', f'echo "INFO: converting" >&2; echo "{reason}" >&2; exit 255; ')
    recipe = mn5_weak_recipe(image=uri)
    job_id = random.randint(1, 10**6)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, 2, job_id=job_id, runtimes={"apptainer": failing})
    assert status == 1 and not any(line.startswith("torchrun ") for line in record), record
    (error,) = [line for line in (tmp_path / "stderr").read_text().splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: apptainer exec of image {uri} failed on node ") and "runs as" not in error
    assert f"(its last error line: {reason}; all of them in {tmp_path}/run/image-check-{job_id}.err)" in error
    assert "apptainer pull a .sif" in error


def test_a_passing_check_leaves_no_error_file(tmp_path):
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, _record = run_job(script, tmp_path, tmp_path, 2)
    assert status == 0 and not list((tmp_path / "run").glob("image-check-*"))


def test_an_image_uri_is_submitted_with_a_warning_to_pull_it_first(tmp_path, monkeypatch, capsys):
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 4")
    uri = f"docker://registry.example/megatron-oellm:{random.randint(0, 10**6)}"
    for mode in ("--dry-run", "--submit"):
        assert main(["recipe", STRONG, mode, "--row", "1", "--image", uri, "--output-dir", str(tmp_path)]) == 0
        warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ")]
        assert warnings == [f"warning: image {uri} is a URI: every node pulls and converts it at job start (compute "
                            f"nodes often have no internet access); `apptainer pull IMAGE.sif {uri}` (or `apptainer "
                            "build`, docs/container.md) on the login node and pass --image IMAGE.sif"], mode
    assert len(record.read_text().splitlines()) == 1
