"""Command-line tools: ``dvsdk``, ``dvsdk-compile``, ``dvsdk-run``, ``dvsdk-agent``.

Every tool shares :func:`entry`: a dvsdk error prints one line with the cause and
exits 2 (bad input) or 3 (device); anything unexpected prints one line and exits 1;
tracebacks only with ``--debug``.  Bad arguments are errors like any other: one line,
exit 2 (:class:`Parser`).  ``dvsdk-run`` adds 4: a run produced non-finite outputs.
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback
from collections.abc import Callable, Sequence
from fractions import Fraction

from ..errors import DvsdkError, InvalidArgument

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_DEVICE, EXIT_NONFINITE = 0, 1, 2, 3, 4


def entry(prog: str, main: Callable[[list[str]], int],
          argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        return int(main(args) or 0)
    except SystemExit as e:  # --help, --version: their status, also when called in-process
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except DvsdkError as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # e.g. `dvsdk-run ... | head`: the reader is gone; stay quiet
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError) as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {describe_error(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - the one place that turns bugs into one line
        if debug:
            traceback.print_exc()
        print(f"{prog}: internal error: {type(e).__name__}: {e} (run with --debug for the "
              "traceback, and please report it)", file=sys.stderr)
        return EXIT_INTERNAL


def describe_error(e: BaseException) -> str:
    """One line for an exception: ``PATH: reason`` for an OSError about a file."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e)


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument raises :class:`InvalidArgument` (one line, exit 2
    through :func:`entry`) instead of printing the usage and exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise InvalidArgument(message, hint=f"see {self.prog} --help")

    def add_version(self) -> None:
        from .. import __version__
        from ..netfile import FORMAT_VERSION

        self.add_argument("--version", action="version",
                          version=f"%(prog)s (dvsdk {__version__}, net.bin format "
                                  f"{FORMAT_VERSION})")


def parse_number(text: str, what: str) -> float:
    """A finite number: ``0.5``, ``1e-3`` or a fraction such as ``1/255``."""
    s = text.strip()
    try:
        value = float(Fraction(s)) if "/" in s else float(s)
    except (ValueError, ZeroDivisionError):
        raise InvalidArgument(f"{what} must be a number or a fraction such as 1/255",
                              field=what, value=text) from None
    if not math.isfinite(value):
        raise InvalidArgument(f"{what} must be finite", field=what, value=text)
    return value


def parse_floats(text: str, n: int | None, what: str, nonzero: bool = False
                 ) -> tuple[float, ...]:
    """Comma-separated numbers (fractions allowed); 1 value or ``n`` of them."""
    vals = tuple(parse_number(v, what) for v in text.split(","))
    if n is not None and len(vals) not in (1, n):
        raise InvalidArgument(f"{what} needs 1 or {n} values", field=what, value=text,
                              limit=n)
    if nonzero and any(v == 0 for v in vals):
        raise InvalidArgument(f"{what} must not be 0 (it divides or multiplies the input)",
                              field=what, value=text)
    return vals * n if n is not None and len(vals) == 1 else vals


# -- argparse ``type=`` checks: a bad value is a one-line error naming the option ------------
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}"
                                         ) from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonzero_number(text: str) -> float:
    try:
        value = parse_number(text, "value")
    except InvalidArgument:
        raise argparse.ArgumentTypeError(f"must be a number or a fraction such as 1/255, got "
                                         f"{text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("must not be 0 (every input would become 0)")
    return value


def parse_hw(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InvalidArgument("size must look like HxW, e.g. 224x224", field="input-size",
                              value=text) from None
    if h < 1 or w < 1:
        raise InvalidArgument("size must be positive", field="input-size", value=text)
    return h, w


def nonfinite(outputs: dict) -> str | None:
    """Which outputs hold NaN or inf, as a sentence; None when all are finite (the
    image path of ``dvsdk-run`` and its frame pipeline, exit 4)."""
    import numpy as np

    counts = [(k, v.size - int(np.count_nonzero(np.isfinite(v))), v.size)
              for k, v in outputs.items()]           # one isfinite pass per output
    bad = [(k, n, size) for k, n, size in counts if n]
    if not bad:
        return None
    which = ", ".join(f"{k!r} {n} of {size}" for k, n, size in bad)
    return (f"non-finite outputs (NaN/inf): {which}; the values overflowed FP16 (+-65504) "
            "on the device: check the input scaling the net.bin was compiled with "
            "(--mean/--scale/--std)")
