"""CTC greedy decoding for text recognizers (CRNN-style OCR).

The output is a (T, K) score matrix per image: T time steps, K = 1 + len(chars) classes,
**class 0 the CTC blank**, class i ≥ 1 the character ``chars[i - 1]``.  Greedy (best-path)
decoding: the best class per step, runs of the same class collapsed to one, blanks
dropped ("hh-e-ll-ll-oo" → "hello": a blank between two equal characters keeps both).

Accepted layouts: (1, T, K), (T, 1, K), (1, K, T) and (T, K); the class axis is the one of
size K (the last when several are).  Scores that are not probabilities (rows not summing
to 1) are turned into them by a softmax over K.  The text's score is the mean probability
of the steps that produced its characters (1.0 for an empty text).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import TaskError


def as_steps(scores: np.ndarray, n_classes: int) -> np.ndarray:
    """The (T, K) matrix of a recognizer's output (module docstring)."""
    s = np.asarray(scores, np.float64)
    if s.ndim == 3:
        if s.shape[0] == 1 and s.shape[2] == n_classes:
            s = s[0]
        elif s.shape[1] == 1 and s.shape[2] == n_classes:
            s = s[:, 0]
        elif s.shape[0] == 1 and s.shape[1] == n_classes:
            s = s[0].T
        else:
            s = None
    if s is None or s.ndim != 2 or s.shape[1] != n_classes:
        raise TaskError("a CTC output must be (1, T, K), (T, 1, K), (1, K, T) or (T, K) with "
                        "K = 1 (blank) + the characters", field="outputs",
                        value=list(np.shape(scores)), limit=f"K = {n_classes}")
    return s


def probabilities(steps: np.ndarray) -> np.ndarray:
    """Rows as probabilities: kept if they already are, else a softmax."""
    if steps.size and steps.min() >= 0 and np.allclose(steps.sum(axis=1), 1.0, atol=1e-2):
        return steps
    e = np.exp(steps - steps.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def greedy(scores: np.ndarray, chars: Sequence[str]) -> tuple[str, float]:
    """(text, score) of one image's output (module docstring)."""
    p = probabilities(as_steps(scores, len(chars) + 1))
    best = np.argmax(p, axis=1)
    keep = (best != 0) & np.concatenate([[True], best[1:] != best[:-1]])
    idx = best[keep]
    table = np.asarray([""] + list(chars), dtype=object)
    text = "".join(table[idx])
    score = float(p[np.flatnonzero(keep), idx].mean()) if len(idx) else 1.0
    return text, score
