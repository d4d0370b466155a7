"""The container binds of a job's inputs follow symbolic links: a ``--data-path`` whose ``.bin``/``.idx`` link into
another folder, or a Hugging Face cache snapshot whose files link to ``../../blobs/<sha>``, was bound by its own
folder only, and the links dangled in the container."""

from __future__ import annotations

import os
import random
from pathlib import Path

from sbatch_job_helpers import mn5_weak_recipe

from megatron.oellm.recipes import RunInputs, resolve_row, sbatch_text
from megatron.oellm.recipes.host_paths import input_binds


def _name(stem: str) -> str:
    """A fresh file or folder name starting with ``stem``."""
    return f"{stem}{random.randrange(10**6)}"


def _link(link: Path, target: Path) -> None:
    """Make ``link`` point at ``target``, by an absolute or a relative path (drawn: both occur in practice)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target if random.random() < 0.5 else os.path.relpath(target, link.parent))


def _linked_dataset(tmp_path: Path) -> tuple[Path, Path]:
    """A dataset prefix in one folder whose ``.bin`` and ``.idx`` are links into another; returns the prefix and the
    folder the files are in."""
    store = tmp_path / _name("store")
    store.mkdir()
    prefix = tmp_path / _name("linked") / _name("text_document")
    for suffix in (".bin", ".idx"):
        (store / f"c{suffix}").write_bytes(random.randbytes(random.randint(1, 64)))
        _link(Path(f"{prefix}{suffix}"), store / f"c{suffix}")
    return prefix, store


def _hub_cache_snapshot(tmp_path: Path) -> tuple[Path, Path]:
    """A Hugging Face hub cache of one tokenizer: ``snapshots/<hash>/<file>`` links to ``../../blobs/<sha>``;
    returns the snapshot folder and the blobs folder."""
    repo = tmp_path / "hub" / _name("models--org--")
    snapshot, blobs = repo / "snapshots" / f"{random.getrandbits(40):010x}", repo / "blobs"
    blobs.mkdir(parents=True)
    for file in random.sample(["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"], k=2):
        blob = blobs / f"{random.getrandbits(64):016x}"
        blob.write_text("{}")
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / file).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return snapshot, blobs


def test_a_linked_dataset_binds_its_folder_and_the_folder_it_links_to(tmp_path):
    prefix, store = _linked_dataset(tmp_path)
    assert input_binds({"data-path": [str(prefix)]}) == [str(prefix.parent), str(store)]


def test_a_hub_cache_snapshot_binds_the_snapshot_and_its_blobs(tmp_path):
    snapshot, blobs = _hub_cache_snapshot(tmp_path)
    assert input_binds({"tokenizer-model": str(snapshot)}) == [str(snapshot), str(blobs)]


def test_every_link_of_a_chain_has_its_folder_bound(tmp_path):
    """A link to a link: the container follows both, so both folders the chain passes through must be there."""
    end = tmp_path / _name("end") / "c.bin"
    end.parent.mkdir()
    end.write_bytes(b"x")
    middle = tmp_path / _name("middle") / "c.bin"
    _link(middle, end)
    prefix = tmp_path / _name("data") / "c"
    _link(prefix.with_suffix(".bin"), middle)
    assert input_binds({"data-path": [str(prefix)]}) == [str(prefix.parent), str(middle.parent), str(end.parent)]


def test_links_within_a_bound_folder_add_no_bind(tmp_path):
    """A link to a file in the bound folder, or below it, is carried by that bind: no second, nested bind."""
    folder = tmp_path / _name("data")
    inner = folder / random.choice(["", _name("sub")])
    inner.mkdir(parents=True, exist_ok=True)
    prefix = folder / "c"
    for suffix in (".bin", ".idx"):
        (inner / f"real{suffix}").write_bytes(b"x")
        _link(Path(f"{prefix}{suffix}"), inner / f"real{suffix}")
    assert input_binds({"data-path": [str(prefix)]}) == [str(folder)]


def test_a_dangling_link_adds_no_bind(tmp_path):
    """A link whose target is missing here leads to nothing to bind (the login-node checks name the missing file)."""
    prefix = tmp_path / _name("data") / "c"
    _link(Path(f"{prefix}.bin"), tmp_path / _name("gone") / "c.bin")
    assert input_binds({"data-path": [str(prefix)]}) == [str(prefix.parent)]


def test_the_job_script_binds_the_folders_the_links_lead_to(tmp_path):
    (tmp_path / "image.sif").touch()
    prefix, store = _linked_dataset(tmp_path)
    snapshot, blobs = _hub_cache_snapshot(tmp_path)
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    inputs = RunInputs(data_path=(str(prefix),), tokenizer_model=str(snapshot))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0], inputs), tmp_path / "run")
    for folder in (prefix.parent, store, snapshot, blobs):
        assert f"--bind {folder} " in script, folder


def test_a_link_to_a_folder_binds_that_folder_not_the_one_above(tmp_path):
    """A tokenizer folder's entry linking to a folder elsewhere bound that folder's parent (one too high: with a link
    to ``/tmp`` it bound ``/``)."""
    tokenizer = tmp_path / _name("tokenizer")
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_bytes(random.randbytes(16))
    shared = tmp_path / _name("store") / _name("shared")
    shared.mkdir(parents=True)
    _link(tokenizer / _name("sub"), shared)
    assert input_binds({"tokenizer-model": str(tokenizer)}) == [str(tokenizer), str(shared.resolve())]


def test_a_link_into_a_system_folder_binds_the_file_alone_and_a_system_folder_is_never_bound(tmp_path):
    """A bind of ``/etc`` (a dataset file linking to ``/etc/hostname``) or of ``/`` hides the image's own: the target
    file is bound alone, and a link to a system folder itself binds nothing."""
    prefix = tmp_path / _name("linked") / _name("text_document")
    system_file = random.choice([path for path in map(Path, ("/etc/hostname", "/etc/hosts", "/etc/passwd"))
                                 if path.is_file() and not path.is_symlink()])
    _link(Path(f"{prefix}.bin"), system_file)
    Path(f"{prefix}.idx").write_bytes(random.randbytes(16))
    tokenizer = tmp_path / _name("tokenizer")
    tokenizer.mkdir()
    (tokenizer / _name("link")).symlink_to(random.choice(["/", "/etc", "/usr"]))
    binds = input_binds({"data-path": [str(prefix)], "tokenizer-model": str(tokenizer)})
    assert binds == [str(prefix.parent), str(tokenizer), str(system_file.resolve())]
