"""The sixteenth mutation audit's test of ``read_config_files``: a config file name that is a symbolic link to a
folder is refused as a folder (what it is), not as a link to nothing; only a link whose target is missing is that."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.hf_config import CONFIG_FILES, read_config_files


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_link_to_a_folder_is_refused_as_a_folder(name: str, tmp_path: Path) -> None:
    folder = tmp_path / f"blob-{random.randrange(10**6)}"
    folder.mkdir()
    model = tmp_path / "model"
    model.mkdir()
    (model / name).symlink_to(folder)
    with pytest.raises(ConversionError) as refused:
        read_config_files(model)
    assert str(refused.value).startswith(f"{model / name} is a folder, not the JSON file {name}: ")
