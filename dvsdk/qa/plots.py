"""Pictures of results: the confusion matrix (Pillow, always available) and, for
``dvsdk analyze --plot``, error per layer (matplotlib, the ``[plot]`` extra)."""

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
