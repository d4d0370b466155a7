"""The sixteenth mutation audit's test of ``oellm table --plot``'s folder check: the folder checked is the one the
image is written to, a symbolic link's target's, not the link's own."""

from __future__ import annotations

import random

import pytest


def test_a_plot_link_to_an_image_in_a_missing_folder_names_that_folder(tmp_path):
    pytest.importorskip("matplotlib")
    from megatron.oellm.scaling_table.plot import check_plot_path
    from megatron.oellm.scaling_table.rows import TableError

    missing = tmp_path / f"gone-{random.randrange(10**6)}"
    link = tmp_path / "fig.png"
    link.symlink_to(missing / "scaling.png")
    with pytest.raises(TableError) as refused:
        check_plot_path(str(link))
    assert str(refused.value) == (f"--plot {str(link)!r}: folder {str(missing)!r} does not exist; create it or name "
                                  "an image in an existing folder")
