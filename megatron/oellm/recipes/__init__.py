"""Benchmark recipes: each table of the scaling reports as a config, resolved to Megatron flags and SLURM jobs.

See :mod:`megatron.oellm.recipes.config` (the :class:`Recipe` dataclass and TOML loading),
:mod:`megatron.oellm.recipes.resolve` (row -> Megatron flags), :mod:`megatron.oellm.recipes.slurm` (sbatch script),
:mod:`megatron.oellm.recipes.submission` (queueing it) and :mod:`megatron.oellm.recipes.local` (fitted-down
``--local`` runs); the checks made before a job is queued: :mod:`megatron.oellm.recipes.host_paths` (what the job
reads on the cluster),
:mod:`megatron.oellm.recipes.flag_names` (every flag name, ``false`` included),
:mod:`megatron.oellm.recipes.megatron_validation` (megatron's ``validate_args`` as the cluster runs it) and
:mod:`megatron.oellm.recipes.timing` (expected run time vs time limit). ``oellm recipe CONFIG`` drives them.
"""

from megatron.oellm.recipes.config import ClusterSettings, LocalSettings, Recipe, RecipeError, TableRow
from megatron.oellm.recipes.resolve import ResolvedRow, RunInputs, resolve_row
from megatron.oellm.recipes.slurm import sbatch_text
from megatron.oellm.recipes.toml_loading import load_recipe

__all__ = ["ClusterSettings", "LocalSettings", "Recipe", "RecipeError", "ResolvedRow", "RunInputs", "TableRow",
           "load_recipe", "resolve_row", "sbatch_text"]
