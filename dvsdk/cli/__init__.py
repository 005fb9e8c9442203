"""Command-line tools: ``dvsdk``, ``dvsdk-compile``, ``dvsdk-run``, ``dvsdk-agent``.

Every tool shares :func:`entry`: a dvsdk error prints one line with the cause and
exits 2 (bad input) or 3 (device); anything unexpected prints one line and exits 1;
tracebacks only with ``--debug``.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence

from ..errors import DvsdkError

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_DEVICE = 0, 1, 2, 3


def entry(prog: str, main: Callable[[list[str]], int],
          argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        return int(main(args) or 0)
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
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - the one place that turns bugs into one line
        if debug:
            traceback.print_exc()
        print(f"{prog}: internal error: {type(e).__name__}: {e} (run with --debug for the "
              "traceback, and please report it)", file=sys.stderr)
        return EXIT_INTERNAL


def parse_floats(text: str, n: int | None, what: str) -> tuple[float, ...]:
    from ..errors import InvalidArgument

    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise InvalidArgument(f"{what} must be comma-separated numbers", field=what,
                              value=text) from None
    if n is not None and len(vals) not in (1, n):
        raise InvalidArgument(f"{what} needs 1 or {n} values", field=what, value=text,
                              limit=n)
    return vals * n if n is not None and len(vals) == 1 else vals


def parse_hw(text: str) -> tuple[int, int]:
    from ..errors import InvalidArgument

    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InvalidArgument("size must look like HxW, e.g. 224x224", field="input-size",
                              value=text) from None
    if h < 1 or w < 1:
        raise InvalidArgument("size must be positive", field="input-size", value=text)
    return h, w
