"""``oellm table --plot`` replaces the image only once the new one is complete: a write that fails midway (a full
disk, a lost quota, a job killed during ``savefig``) left a truncated image under the name, which passes for a plot,
with the earlier good one gone. Rows from generated Megatron logs, fresh random throughputs."""

from __future__ import annotations

import errno
import random
import re

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import TableError, Window, plot, summarise
from megatron.oellm.scaling_table.plot import save_replacing
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

pytest.importorskip("matplotlib")


def _rows() -> list:
    rows = []
    for nodes in (4, 8, 16):
        args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4})
        step_ms = 4096 * 4096 / random.uniform(5000, 7500) / (nodes * 4) * 1000
        rows.append(summarise(parse_log_text(megatron_log(args, [step_ms] * 10, [120.0] * 10), f"{nodes}n.log"),
                              Window(), 4))
    return rows


def _fail_midway(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every figure's ``savefig`` write part of an image, then fail as a full disk does."""
    from matplotlib.figure import Figure

    def savefig(self, fname, **kwargs):
        with open(fname, "wb") as file:
            file.write(b"\x89PNG\r\n\x1a\n" + random.randbytes(64))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)


def test_a_failed_write_keeps_the_earlier_plot_and_leaves_no_partial(tmp_path, monkeypatch):
    path = tmp_path / "scaling.png"
    plot(_rows(), str(path))
    earlier = path.read_bytes()
    _fail_midway(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        plot(_rows(), str(path))
    assert path.read_bytes() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaling.png"]


def test_a_failed_first_write_leaves_no_image(tmp_path, monkeypatch):
    _fail_midway(monkeypatch)
    with pytest.raises(OSError):
        plot(_rows(), str(tmp_path / "scaling.pdf"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extension", ["png", "pdf", "svg"])
def test_the_image_is_complete_in_its_own_format_with_the_usual_permissions(tmp_path, extension):
    """The temporary name has no image extension: the format still follows the name given; the mode is what a
    file created in the folder gets (the umask), not a temporary file's 0600."""
    path = tmp_path / f"scaling.{extension}"
    plot(_rows(), str(path))
    data = path.read_bytes()
    magic = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF", "svg": b"<?xml"}[extension]
    assert data.startswith(magic) and len(data) > 1000
    if extension == "png":
        from matplotlib.image import imread

        assert imread(str(path)).shape[0] > 100
    (tmp_path / "reference").write_bytes(b"")
    assert path.stat().st_mode & 0o777 == (tmp_path / "reference").stat().st_mode & 0o777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reference", path.name]


def test_a_symlinked_plot_stays_a_link_to_the_new_image_with_its_mode(tmp_path):
    """A plot linked into a shared folder kept being updated through the link before the image was written under a
    temporary name; replacing the link itself left the shared image stale, and the group lost its write access."""
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "scaling.png"
    plot(_rows(), str(target))
    mode = random.choice([0o664, 0o640, 0o600])
    target.chmod(mode)
    earlier = target.read_bytes()
    link = tmp_path / "plot.png"
    link.symlink_to(target)
    plot(_rows(), str(link))
    assert link.is_symlink() and link.resolve() == target
    assert target.read_bytes() != earlier and target.read_bytes().startswith(b"\x89PNG")
    assert target.stat().st_mode & 0o777 == mode
    assert sorted(p.name for p in shared.iterdir()) == ["scaling.png"]


def test_a_link_named_as_an_image_to_a_user_file_is_refused_and_the_file_kept(tmp_path):
    """``--plot fig.png`` where ``fig.png`` links to ``notes.txt``: the extension was checked on the link's name and
    the image replaced the notes. The target's extension is checked too, and the figure is saved in the target's
    format, which matplotlib refuses for a ``.txt``: the notes are kept either way."""
    from matplotlib.figure import Figure

    notes = tmp_path / random.choice(["notes.txt", "slurm-1234.out", "README"])
    notes.write_text("".join(random.choices("abcdefgh \n", k=200)))
    earlier = notes.read_bytes()
    link = tmp_path / "fig.png"
    link.symlink_to(notes)
    refusal = f"--plot '{link}' is a link to '{notes.resolve()}', which is no image file"
    with pytest.raises(TableError, match=re.escape(refusal)):
        plot(_rows(), str(link))
    figure = Figure()
    figure.add_subplot().plot([1, 2, 3], [random.random() for _ in range(3)])
    with pytest.raises(ValueError):
        save_replacing(figure, str(link))
    assert notes.read_bytes() == earlier and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([notes.name, link.name])


def test_a_link_to_an_image_of_another_format_is_written_in_the_targets_format(tmp_path):
    """A link ``plot.png`` to ``scaling.pdf`` still updates the image through the link, as a PDF: it wrote PNG bytes
    into the ``.pdf``."""
    target = tmp_path / "scaling.pdf"
    plot(_rows(), str(target))
    earlier = target.read_bytes()
    link = tmp_path / "plot.png"
    link.symlink_to(target)
    plot(_rows(), str(link))
    assert link.is_symlink() and target.read_bytes() != earlier and target.read_bytes().startswith(b"%PDF")
