"""``oellm recipe --submit`` refuses a job without the ``sbatch`` options its cluster requires
(``cluster.required_options``: MN5 account and QOS, Jupiter account), before any ``sbatch`` call: MN5's table was
submitted with neither. An option exported as sbatch's own input variable (``SBATCH_ACCOUNT`` ...) counts as given,
and ``--dry-run`` names what ``--submit`` will need."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES, fake_sbatch

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe

STRONG = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
JUPITER = str(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")


def _submit(tmp_path, config: str, *options: str) -> int:
    image = tmp_path / "image.sif"
    image.touch()
    return main(["recipe", config, "--submit", "--row", "2", "--image", str(image), "--output-dir",
                 str(tmp_path / "runs"), *options])


def test_the_shipped_clusters_require_what_their_sites_need():
    assert load_recipe(STRONG).cluster.required_options == ("account", "qos")
    assert load_recipe(JUPITER).cluster.required_options == ("account",)


@pytest.mark.parametrize(("config", "given", "missing"), [
    (STRONG, [], ["account", "qos"]), (STRONG, ["--account", "ehpc533"], ["qos"]),
    (STRONG, ["--qos", "acc_ehpc"], ["account"]), (JUPITER, [], ["account"])])
def test_a_missing_required_option_is_refused_before_sbatch(tmp_path, monkeypatch, capsys, config, given, missing):
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 5", options_exported=False)
    assert _submit(tmp_path, config, *given) == 2
    out, err = capsys.readouterr()
    flags = " and ".join(f"--{name}" for name in missing)
    assert out == "" and err.startswith(f"oellm recipe: error: --submit needs {flags}, which cluster ") and \
        err.count("\n") == 1, err
    assert " and ".join(f"SBATCH_{name.upper()}" for name in missing) + " exported" in err
    assert not record.exists() and not (tmp_path / "runs").exists()  # no sbatch call, no run directory


def test_options_exported_for_sbatch_count_as_given(tmp_path, monkeypatch, capsys):
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 5", options_exported=False)
    monkeypatch.setenv("SBATCH_ACCOUNT", f"ehpc{random.randint(100, 999)}")
    monkeypatch.setenv("SBATCH_QOS", f"acc_{random.randint(0, 99)}")
    assert _submit(tmp_path, STRONG) == 0, capsys.readouterr().err
    assert len(record.read_text().splitlines()) == 1


def test_the_dry_run_names_what_submit_will_need(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    monkeypatch.delenv("SBATCH_QOS", raising=False)
    assert main(["recipe", STRONG, "--dry-run", "--row", "1", "--output-dir", str(tmp_path)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: --submit will need")]
    assert notes == ["note: --submit will need --account and --qos, which cluster mn5 requires (or cluster.account "
                     "and cluster.qos in the recipe, or SBATCH_ACCOUNT and SBATCH_QOS exported)"]
    assert main(["recipe", STRONG, "--dry-run", "--row", "1", "--output-dir", str(tmp_path), "--account", "a",
                 "--qos", "q"]) == 0
    assert "note: --submit will need" not in capsys.readouterr().out


def test_an_option_no_check_knows_is_refused_in_the_recipe(tmp_path):
    name = random.choice(["acount", "reservation", "constraint"])
    config = tmp_path / "cluster.toml"
    config.write_text(f'extends = "{STRONG}"\n[cluster]\nrequired_options = ["account", "{name}"]\n')
    with pytest.raises(RecipeError, match=f"cluster.required_options entry '{name}' is not one of account, qos, "
                                          "partition"):
        load_recipe(config)
