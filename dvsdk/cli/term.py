"""The terminal of a command-line run: results on stdout, errors and a progress bar on stderr.

The bar is one line redrawn in place (``\\r`` and erase-to-end ``ESC [ K``), drawn only
when stderr is a terminal.  Anything else written while it is shown (a result on stdout,
an error on stderr, often the same terminal) first erases the bar and then redraws it
below, so a result never shares a line with the bar.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

CLEAR_LINE = "\r\x1b[K"


class Console:
    """Prints results and errors around an optional progress bar of ``total`` steps."""

    def __init__(self, prog: str, total: int = 0, bar: bool = True) -> None:
        self.prog = prog
        self.total, self.done = total, 0
        self.label = ""
        self.bar = bar and total > 1 and sys.stderr.isatty()
        self.shown = False
        self.t0 = time.perf_counter()

    # -- output ---------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """A result line on stdout."""
        self._write(sys.stdout, text)

    def error(self, text: str) -> None:
        """An error line on stderr, ``prog: error: text``."""
        self._write(sys.stderr, f"{self.prog}: error: {text}")

    def _write(self, stream: TextIO, text: str) -> None:
        was = self.shown
        self._erase()
        stream.write(text + "\n")
        stream.flush()
        if was:
            self._draw()

    # -- the bar ------------------------------------------------------------------------
    def step(self, label: str = "") -> None:
        self.done += 1
        self.label = label
        if self.bar:
            self._draw()

    def restart(self, total: int, bar: bool = True) -> None:
        """A new bar (e.g. the benchmark's runs after the inputs')."""
        self.close()
        self.total, self.done = total, 0
        self.bar = bar and total > 1 and sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def _draw(self) -> None:
        width = 30
        fill = int(width * min(self.done, self.total) / max(self.total, 1))
        rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
        sys.stdout.flush()
        sys.stderr.write(f"{CLEAR_LINE}[{'#' * fill}{'.' * (width - fill)}] {self.done}/"
                         f"{self.total} {rate:.1f}/s {self.label[-30:]}")
        sys.stderr.flush()
        self.shown = True

    def _erase(self) -> None:
        if self.shown:
            sys.stderr.write(CLEAR_LINE)
            sys.stderr.flush()
            self.shown = False

    def close(self) -> None:
        self._erase()
