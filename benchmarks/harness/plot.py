"""The PNG: bandwidth per shape for each backend, one panel per op and dtype."""

from __future__ import annotations

from typing import Sequence

from .report import CASE, Row

EXTRA_HINT = '--plot needs matplotlib: pip install ".[bench]"'


def plotting_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _panel(ax, cell: Sequence[Row], ceiling_tbps: float | None) -> None:
    shapes = list(dict.fromkeys(r.shape for r in cell))
    backends = list(dict.fromkeys(r.backend for r in cell))
    width = 0.8 / max(1, len(backends))
    missing_x: list[float] = []
    for k, backend in enumerate(backends):
        by_shape = {r.shape: r for r in cell if r.backend == backend}
        xs, heights = [], []
        for n, shape in enumerate(shapes):
            x = n + (k - (len(backends) - 1) / 2) * width
            tbps = ((by_shape[shape].bench or {}).get("tbps")) if shape in by_shape else None
            if tbps is None:
                missing_x.append(x)  # not run, failed, or an invalid figure
            else:
                xs.append(x)
                heights.append(tbps)
        ax.bar(xs, heights, width, label=backend)
    if missing_x:
        ax.plot(missing_x, [0] * len(missing_x), "x", color="red", markersize=7, clip_on=False,
                label="no valid figure (not run, error or invalid)")
    if ceiling_tbps:
        ax.axhline(ceiling_tbps, color="black", linestyle="--", linewidth=1,
                   label=f"copy ceiling {ceiling_tbps:.3g} TB/s")
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=35, ha="right", fontsize=7)
    ax.set_xlabel("shape (rows x cols, or elements)", fontsize=8)
    ax.set_ylabel("bandwidth (TB/s, bytes moved / time per call)", fontsize=8)
    ax.legend(fontsize=6)


def draw_plot(path: str, rows: Sequence[Row], ceiling_tbps: float | None, title: str) -> None:
    """One panel per op (rows) and dtype (columns); the panels of a dtype share one y-scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [r for r in rows if r.kind == CASE and (r.bench is not None or r.skipped or r.error)]
    ops = list(dict.fromkeys(r.op for r in cases))
    dtypes = list(dict.fromkeys(r.dtype for r in cases))
    if not ops:
        raise ValueError("no timed rows to plot")
    fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(7 * len(dtypes), 3.6 * len(ops)),
                             squeeze=False, sharey="col")
    for i, op in enumerate(ops):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            _panel(ax, [r for r in cases if r.op == op and r.dtype == dtype], ceiling_tbps)
            ax.set_title(f"{op} {dtype}", fontsize=9)
            ax.tick_params(axis="y", labelleft=True)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))  # room for the title's lines
    fig.savefig(path, dpi=110)
    plt.close(fig)
