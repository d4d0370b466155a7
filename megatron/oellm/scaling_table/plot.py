"""The scaling plot: tokens/s/GPU and efficiency against nodes, one line per scaling series, written only once
complete. Needs matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from megatron.oellm.paths import replace_atomically, symlink_loop
from megatron.oellm.scaling_table.rows import ScalingRow, TableError
from megatron.oellm.scaling_table.summary import series_of, varying_settings


def scaling_series(rows: Sequence[ScalingRow]) -> list[tuple[str, list[ScalingRow]]]:
    """The ok rows as the scaling series the table's efficiencies compare (:func:`comparable`), each a legend label
    and its rows by nodes: a strong-scaling series (one model, sequence length, benchmark settings and global batch
    size) or a weak-scaling one (one model, sequence length, benchmark settings and global batch size per GPU) over
    two or more node counts, so that a plot draws the report's two tables as two lines, not one zigzag. A run can
    close both (the report's 64-node run at GBS 4096); a run in neither is a series of its own global batch size.
    A label names the benchmark settings in which the rows differ (:func:`varying_settings`), so that the series of
    forced and real routing are told apart."""
    varying = varying_settings(rows)
    groups: dict[tuple, list[ScalingRow]] = {}
    for row in (row for row in rows if row.ok):
        for key in series_of(row):
            groups.setdefault(key, []).append(row)
    series, in_series = [], set()
    for (kind, model, _, seq_length, settings, batch), members in groups.items():
        if len({row.nodes for row in members}) >= 2:
            size = f"GBS {batch}" if kind == "strong" else f"GBS {float(batch):g} per GPU"
            label = f"{model}, seq {seq_length}, {size}{_settings_label(settings, varying)}"
            series.append((f"{label} ({kind} scaling)", members))
            in_series.update(id(row) for row in members)
    for (kind, model, _, seq_length, settings, batch), members in groups.items():
        if kind == "strong" and not in_series.intersection(id(row) for row in members):
            series.append((f"{model}, seq {seq_length}, GBS {batch}{_settings_label(settings, varying)}", members))
    return [(label, sorted(members, key=lambda row: row.nodes)) for label, members in series]


def _settings_label(settings: tuple[tuple[str, str], ...], varying: Sequence[str]) -> str:
    """``, NAME VALUE`` for each of a series' ``settings`` that is among the ``varying`` ones ('' for none)."""
    return "".join(f", {name} {value}" for name, value in settings if name in varying)


PANEL_INCHES = 5.0
"""Height of the plot's two panels (throughput and efficiency), titles and axis labels included."""


LEGEND_ROW_INCHES = 0.21
"""Height of one row of the plot's legend (two series side by side) at its small font."""


SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Markers of the plot's series: the first ten series take matplotlib's ten colours with the first marker, the next
ten the second marker, and so on, so 80 series are told apart before a pair repeats."""


def check_plot_path(path: str) -> None:
    """Raise :class:`TableError` unless matplotlib writes the image at ``path`` as named: the extension names a format
    it writes (it picks the format from the extension, and without one it writes ``path + ".png"``, replacing a file
    the user never named; an unknown one, e.g. a log's ``.out``, ends in its ValueError) and ``path`` is no folder.
    A symlink's target must have an image extension too: the image replaces the target, and a link named ``fig.png``
    to ``notes.txt`` wrote PNG bytes into the notes; a loop of symbolic links (``fig.png -> fig.png``) is refused
    (it was taken for a new file, and the image replaced the link). Its folder must exist and be writable, checked
    before any log is read, as the other checks are. Needs matplotlib (the ``plot`` extra)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise TableError("--plot needs matplotlib: pip install 'megatron-oellm[plot]' (or pip install "
                         "matplotlib)") from None
    loop = symlink_loop(Path(path))
    if loop is not None:  # else taken for a new file: the image replaced the looping link
        raise TableError(f"--plot {path!r} cannot be resolved: it goes through a symlink loop ({loop.strerror}); "
                         "point the link at an image file, or name another")
    if os.path.isdir(path):
        raise TableError(f"--plot {path!r} is a folder; name the image file, e.g. {os.path.join(path, 'scaling.png')}")
    target = os.path.realpath(path)  # the file the image replaces: a symlink's target
    folder = os.path.dirname(target)  # where the image is written
    if not os.path.isdir(folder):
        raise TableError(f"--plot {path!r}: folder {folder!r} does not exist; create it or name an image in an "
                         "existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TableError(f"--plot {path!r}: folder {folder!r} is not writable; name an image in a folder you can "
                         "write to")
    formats = FigureCanvasBase.get_supported_filetypes()
    extension = _extension(path)
    if extension not in formats:
        found = (f"matplotlib writes no {extension!r} image" if extension else
                 f"without an extension matplotlib would write {path + '.png'!r} instead")
        raise TableError(f"--plot {path!r}: {found}; name the image file, e.g. scaling.png (or .pdf, .svg)")
    if _extension(target) not in formats:  # a link named fig.png to notes.txt: the image would replace notes.txt
        raise TableError(f"--plot {path!r} is a link to {target!r}, which is no image file: the plot would replace "
                         "it; name the image file, e.g. scaling.png (or .pdf, .svg)")


def _extension(path: str) -> str:
    """The extension of ``path``'s name, lower case and without its dot ('' for none): matplotlib's format name."""
    return os.path.splitext(path)[1][1:].lower()


def plot(rows: Sequence[ScalingRow], path: str, title: str = "") -> None:
    """PNG of tokens/s/GPU and efficiency vs nodes (ok rows only), one line per :func:`scaling_series` with a
    legend; the efficiency panel draws the series whose rows all have one (the baseline's strong and weak series:
    another series' row relative to that baseline is no point of its own curve). The figure grows by a legend row per
    two series, so a sweep's many series keep their panels, and each of the first 80 series has its own colour and
    marker pair (:data:`SERIES_MARKERS`; the 81st takes the first's again). Needs matplotlib (the ``plot`` extra)."""
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = scaling_series(rows)
    if not series:
        raise TableError("--plot: no row has numbers to plot")
    nodes = sorted({row.nodes for _, members in series for row in members})
    legend_inches = LEGEND_ROW_INCHES * (math.ceil(len(series) / 2) + 1)
    figure, (throughput, efficiency) = plt.subplots(1, 2, figsize=(12, PANEL_INCHES + legend_inches))
    top_tokens, top_percent = 0.0, 110.0  # room above a baseline's 100% or any higher row
    for index, (label, members) in enumerate(series):
        style = {"marker": SERIES_MARKERS[index // 10 % len(SERIES_MARKERS)], "color": f"C{index % 10}", "label": label}
        tokens = [row.tokens_per_s_per_gpu for row in members]
        throughput.plot([row.nodes for row in members], tokens, **style)
        top_tokens = max([top_tokens, *tokens])
        if all(row.efficiency is not None for row in members):
            percents = [100 * row.efficiency for row in members]
            efficiency.plot([row.nodes for row in members], percents, **style)
            top_percent = max([top_percent] + [1.05 * percent for percent in percents])
    throughput.set(xlabel="nodes", ylabel="tokens/s/GPU", xscale="log", ylim=(0, 1.1 * top_tokens), title="throughput")
    efficiency.set(xlabel="nodes", ylabel="efficiency (%)", xscale="log", ylim=(0, top_percent), title="efficiency")
    for axis in (throughput, efficiency):
        axis.set_xticks(nodes, [f"{n:g}" for n in nodes])
        axis.minorticks_off()
        axis.grid(alpha=0.3)
    figure.legend(*throughput.get_legend_handles_labels(), loc="lower center", ncol=min(len(series), 2),
                  fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout(rect=(0, legend_inches / (PANEL_INCHES + legend_inches), 1, 1))
    try:
        save_replacing(figure, path)
    finally:
        plt.close(figure)


def save_replacing(figure: Any, path: str) -> None:
    """Save ``figure`` to ``path`` through :func:`megatron.oellm.paths.replace_atomically`: a full disk, a lost quota
    or a killed job mid-write left a truncated image under the name, which passes for a plot, with the earlier good
    one gone. The format is the extension of the file written, the link's target for a link (the temporary name has
    another), so the bytes match the name of the file they replace; matplotlib refuses a target that is no image
    (:func:`check_plot_path` names it first)."""
    image_format = _extension(os.path.realpath(path))
    replace_atomically(path, lambda temporary: figure.savefig(temporary, dpi=120, format=image_format))
