"""Pictures of results: the confusion matrix (matplotlib, the ``[plot]`` extra, with a
Pillow fallback) and, for ``dvsdk analyze --plot``, error per layer (matplotlib)."""

from __future__ import annotations

import io
import os

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


def error_plot(rows, worst: set[int], path: str | os.PathLike) -> None:
    """Relative error (log scale) per compared tensor along the network; device commands
    and CPU steps in two colours, the worst layers labelled."""
    from ..errors import InvalidArgument

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidArgument("--plot needs matplotlib", field="plot", value=str(path),
                              hint="pip install 'dvsdk[plot]'") from None
    idx = np.array([r.index for r in rows])
    rel = np.array([max(r.rel, 1e-9) for r in rows])
    hw = np.array([r.where == "hw" for r in rows])
    fig, ax = plt.subplots(figsize=(max(6.0, len(rows) * 0.08), 3.5), dpi=100)
    ax.plot(idx, rel, color="#999", linewidth=0.8)
    ax.scatter(idx[hw], rel[hw], s=10, label="DV700 command", color="#1f5fbf")
    ax.scatter(idx[~hw], rel[~hw], s=10, label="CPU step", color="#d9822b")
    for r in rows:
        if r.index in worst:
            ax.annotate(r.tensor[-20:], (r.index, max(r.rel, 1e-9)), fontsize=7,
                        rotation=30, xytext=(3, 3), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("tensor along the network")
    ax.set_ylabel("max |error| / range")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
