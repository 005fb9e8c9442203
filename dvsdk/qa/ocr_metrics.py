"""Text recognition accuracy: character accuracy by edit distance, and word accuracy.

* **edit distance** (Levenshtein): the fewest single-character insertions, deletions and
  substitutions that turn the prediction into the label.
* **character accuracy** over a set = 1 − (Σ edit distances) / (Σ label lengths), at
  least 0 (so a prediction of pure noise scores 0, not below); 1 when every prediction
  equals its label.  ``cer`` = Σ edit distances / Σ label lengths (not clipped).  A set
  whose labels are all empty has character accuracy 1 if every prediction is empty, else 0.
* **word accuracy** = the share of samples whose prediction equals the label exactly
  (each sample being one word or text line, as recognizers are evaluated).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DatasetError


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance.  Row by row (one row per character of ``a``), each row one
    vectorized step: deletions and substitutions from the row above, then insertions
    along the row as a running minimum, ``row[j] = j + min_{i<=j}(tmp[i] - i)``."""
    if not a or not b:
        return len(a) + len(b)
    bb = np.frombuffer(b.encode("utf-32-le"), np.uint32)
    j = np.arange(len(bb) + 1)
    row = j.copy()
    for ch in np.frombuffer(a.encode("utf-32-le"), np.uint32):
        tmp = np.empty_like(row)
        tmp[0] = row[0] + 1
        tmp[1:] = np.minimum(row[1:] + 1, row[:-1] + (bb != ch))
        row = j + np.minimum.accumulate(tmp - j)
    return int(row[-1])


def text_summary(predictions: Sequence[str], labels: Sequence[str]) -> dict:
    """``char_accuracy``, ``cer``, ``word_accuracy``, ``samples``, ``chars`` (module
    docstring)."""
    if len(predictions) != len(labels):
        raise DatasetError("one prediction per label", field="predictions",
                           value=len(predictions), limit=len(labels))
    edits = sum(edit_distance(p, t) for p, t in zip(predictions, labels))
    chars = sum(len(t) for t in labels)
    if chars:
        cer = edits / chars
        acc = max(0.0, 1.0 - cer)
    else:
        cer, acc = (0.0, 1.0) if edits == 0 else (float(edits), 0.0)
    words = sum(p == t for p, t in zip(predictions, labels))
    return {"char_accuracy": acc, "cer": cer,
            "word_accuracy": words / len(labels) if labels else 0.0,
            "samples": len(labels), "chars": chars, "edits": edits}
