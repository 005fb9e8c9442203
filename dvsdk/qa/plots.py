"""Pictures of results: the confusion matrix (matplotlib, the ``[plot]`` extra, with a
Pillow fallback) and, for ``dvsdk analyze --plot``, error per layer (matplotlib)."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from ..fsutil import atomic_write


def confusion_image(conf: np.ndarray, classes: list[str]):  # -> PIL.Image.Image
    """Rows = true class, columns = predicted; each row normalized (recall on the diagonal);
    white (0) to dark blue (1), counts printed where cells are large enough."""
    from PIL import Image, ImageDraw, ImageFont

    conf = np.asarray(conf, np.int64)
    k = conf.shape[0]
    cell = int(np.clip(640 // max(k, 1), 6, 48))
    rows = conf.sum(axis=1, keepdims=True)
    share = np.where(rows > 0, conf / np.maximum(rows, 1), 0.0)
    font = ImageFont.load_default()
    label_w = 0 if cell < 12 else min(120, 7 * max((len(c) for c in classes), default=1) + 8)
    top = label_w
    img = Image.new("RGB", (label_w + k * cell + 1, top + k * cell + 1), "white")
    draw = ImageDraw.Draw(img)
    rgb = (255 - share[..., None] * np.array([220, 160, 40])).astype(np.uint8)  # white→blue
    grid = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    img.paste(Image.fromarray(grid, "RGB"), (label_w, top))
    for i in range(k + 1):
        draw.line([(label_w, top + i * cell), (label_w + k * cell, top + i * cell)], "#999")
        draw.line([(label_w + i * cell, top), (label_w + i * cell, top + k * cell)], "#999")
    if label_w:
        for i, name in enumerate(classes[:k]):
            draw.text((2, top + i * cell + cell // 2 - 5), name[:16], fill="black", font=font)
            col = Image.new("RGB", (label_w, cell), "white")
            ImageDraw.Draw(col).text((2, cell // 2 - 5), name[:16], fill="black", font=font)
            img.paste(col.rotate(90, expand=True), (label_w + i * cell, 0))
    if cell >= 24:
        for (i, j), n in np.ndenumerate(conf):
            if n:
                color = "white" if share[i, j] > 0.5 else "black"
                draw.text((label_w + j * cell + 3, top + i * cell + cell // 2 - 5), str(n),
                          fill=color, font=font)
    return img


#: above this many classes the confusion figure shows the most confused ones only
CONFUSION_TOP = 30


def most_confused(conf: np.ndarray, top: int = CONFUSION_TOP) -> np.ndarray:
    """The ``top`` classes of the largest confusions: both classes of the largest
    off-diagonal cells, largest first (a pair side by side), then, if fewer than ``top``
    classes were ever confused, the rest in index order. All classes, in order, when
    there are at most ``top``."""
    conf = np.asarray(conf, np.int64)
    k = len(conf)
    if k <= top:
        return np.arange(k)
    off = conf - np.diag(np.diag(conf))
    flat = off.ravel()
    cells = np.flatnonzero(flat)
    cells = cells[np.argsort(-flat[cells], kind="stable")]
    pairs = np.stack([cells // k, cells % k], 1).ravel()      # true, predicted, ...
    _, first = np.unique(pairs, return_index=True)
    picked = pairs[np.sort(first)][:top]
    rest = np.setdiff1d(np.arange(k), picked)[: top - len(picked)]
    return np.concatenate([picked, rest]).astype(np.int64)


def confusion_figure(conf: np.ndarray, classes: list[str], top: int = CONFUSION_TOP):
    """The confusion matrix as a matplotlib figure: rows = true class, columns =
    predicted, each row divided by its class's count (recall on the diagonal). With more
    than ``top`` classes, only the ``top`` most confused, plus an "other" column (the
    share predicted as any class not shown), so the picture stays readable at 1,000."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conf = np.asarray(conf, np.int64)
    k = len(conf)
    keep = most_confused(conf, top)
    rows = conf.sum(axis=1)
    sub = conf[np.ix_(keep, keep)]
    cols = [classes[i][:24] if i < len(classes) else str(i) for i in keep]
    if len(keep) < k:
        sub = np.concatenate([sub, (rows[keep] - sub.sum(axis=1))[:, None]], axis=1)
        cols = [*cols, "other"]
    share = sub / np.maximum(rows[keep], 1)[:, None]
    n = len(keep)
    side = float(np.clip(0.32 * n + 2.5, 4.0, 14.0))
    fig, ax = plt.subplots(figsize=(side + 1.2, side), dpi=100)
    im = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto",
                   interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    small = 6 if n > 20 else 8
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=small)
    ax.set_yticks(range(n), cols[:n], fontsize=small)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    title = "confusion matrix (rows: share of each true class; recall on the diagonal)"
    if n < k:
        title = (f"confusion matrix: the {n} classes of the largest confusions (of {k})\n"
                 "(rows: share of each true class; 'other': predicted as a class not shown)")
    ax.set_title(title, fontsize=9)
    if n <= 30:
        for (i, j), v in np.ndenumerate(sub):
            if v:
                ax.text(j, i, str(v), ha="center", va="center", fontsize=small,
                        color="white" if share[i, j] > 0.5 else "black")
    fig.tight_layout()
    return fig


def save_confusion(conf: np.ndarray, classes: list[str], path: str | os.PathLike,
                   top: int = CONFUSION_TOP) -> None:
    """The confusion PNG, atomically: :func:`confusion_figure`, or without matplotlib
    the plain Pillow picture of :func:`confusion_image`."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        save_png(confusion_image(conf, classes), path)
        return
    import matplotlib.pyplot as plt

    fig = confusion_figure(conf, classes, top)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()))


def save_png(img, path: str | os.PathLike) -> None:
    """Write a PIL image as PNG, atomically."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    atomic_write(path, lambda f: f.write(buf.getvalue()))


def error_plot(rows, worst: set[int], path: str | os.PathLike, tolerance: float = 0.01,
               top: int = 30, isolated: bool = False) -> None:
    """:func:`error_figure` written to ``path`` as PNG, atomically."""
    fig = error_figure(rows, worst, tolerance, top, isolated, path)
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()))


def error_figure(rows, worst: set[int], tolerance: float = 0.01, top: int = 30,
                 isolated: bool = False, path: Any = None):  # -> matplotlib Figure
    """Horizontal bars, one per layer, sorted by contribution to the output's error (the
    ``top`` largest, largest first): each labelled ``#index tensor`` (distinct, one a row,
    so 50+ layers never overlap) and its producer, DV700 commands and CPU steps in two
    colours, the ``worst`` ones starred, a dashed line at ``tolerance``.
    Without contributions (``analyze(contribution=False)``) the bars are ``added``."""
    from ..errors import InvalidArgument

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.lines
        import matplotlib.pyplot as plt
        import matplotlib.ticker
        from matplotlib.patches import Patch
    except ImportError:
        raise InvalidArgument("--plot needs matplotlib", field="plot", value=str(path or ""),
                              hint="pip install 'dvsdk[plot]'") from None
    by_contrib = all(r.contribution is not None for r in rows)
    value = (lambda r: r.contribution) if by_contrib else (lambda r: max(r.added, 0.0))
    shown = sorted(rows, key=lambda r: (-value(r), r.index))[: max(1, int(top))]
    vals = np.array([value(r) for r in shown], np.float64)
    labels = [f"{'* ' if r.index in worst else ''}#{r.index} {_short(r.tensor, 28)} · "
              f"{r.producer[:26]}" for r in shown]
    colors = ["#1f5fbf" if r.where == "hw" else "#d9822b" for r in shown]
    width = min(16.0, 6.0 + 0.065 * max(len(lab) for lab in labels))  # room for the labels
    fig, ax = plt.subplots(figsize=(width, max(3.0, 1.4 + 0.28 * len(shown))), dpi=100)
    y = np.arange(len(shown))
    ax.barh(y, vals, color=colors, height=0.7)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()   # the largest on top
    ax.axvline(tolerance, color="#333", linestyle="--", linewidth=1)
    hi = max(float(vals.max(initial=0.0)), tolerance) * 1.25
    ax.set_xlim(0, hi)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    for yi, v in zip(y, vals):
        ax.text(v + hi * 0.01, yi, f"{v:.2%}" if v == 0 or v >= 1e-4 else f"{v:.1e}",
                va="center", fontsize=7)
    what = ("output error with this layer alone on the device (max |error| / range)"
            if by_contrib else "error the layer adds (max |error| / range)")
    ax.set_xlabel(what)
    ax.set_ylabel("layer (* = worst)")
    mode = ", inputs from the reference" if isolated else ""
    ax.set_title(f"dvsdk analyze: {len(shown)} of {len(rows)} layers by contribution to "
                 f"the output error{mode}\n(each: # along the network, tensor · producer)",
                 fontsize=10)
    ax.legend(handles=[Patch(color="#1f5fbf", label="DV700 command"),
                       Patch(color="#d9822b", label="CPU step"),
                       matplotlib.lines.Line2D([], [], color="#333", linestyle="--",
                                               label=f"tolerance {tolerance:.2%}")],
              loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def _short(name: str, n: int) -> str:
    """``name``, or its last ``n - 1`` characters after an ellipsis."""
    return name if len(name) <= n else "…" + name[-(n - 1):]
