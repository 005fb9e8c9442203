"""``dvsdk replay run.dvrec``: re-execute a recording, bit-level diff (see dvsdk.qa.replay)."""

from __future__ import annotations

import argparse
import json

from . import Parser

EPILOG = """examples:
  dvsdk-run net.bin image.png --device uio:// --record board.dvrec     # on the board
  dvsdk replay board.dvrec                                              # on the simulator
  dvsdk replay board.dvrec --device socket://board2:7000 --json

exit status: 0 every exec bit-identical, 5 a difference, 2 bad recording, 3 device problem
"""

EXIT_DIFFERS = 5


def build_parser() -> Parser:
    p = Parser(prog="dvsdk replay", epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter,
               description="Replay a recording (dvsdk-run --record) and diff it bit by bit.")
    p.add_argument("recording", help="the .dvrec file")
    p.add_argument("--device", default=None, metavar="URL", help="default: sim://")
    p.add_argument("--timeout", type=float, default=10.0, help="per exec, seconds")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: list[str]) -> int:
    from ..qa.replay import replay

    args = build_parser().parse_args(argv)
    results, info = replay(args.recording, args.device or "sim://", args.timeout)
    same = all(r.identical for r in results)
    if args.json:
        print(json.dumps({"recorded_on": info, "identical": same,
                          "execs": [r.as_dict() for r in results]}, indent=1))
        return 0 if same else EXIT_DIFFERS
    # the recording's own words about its device, shown as they are (not trusted as str)
    where = str(info.get("backend", "?")) + (" (simulated)" if info.get("simulated") is True
                                             else "")
    print(f"recorded on {where}; {len(results)} execs replayed on {args.device or 'sim://'}")
    print(f"{'#':>4s} {'unit':9s} {'cmds':>4s} {'result':10s} {'recorded us':>12s} "
          f"{'replayed us':>12s}")
    for r in results:
        print(f"{r.index:4d} {r.unit:9s} {r.commands:4d} "
              f"{'identical' if r.identical else 'DIFFERS':10s} {r.recorded_us:12.1f} "
              f"{r.replayed_us:12.1f}")
        if r.command_us:
            print("       predicted per command (us): "
                  + " ".join(f"{u:.1f}" for u in r.command_us))
        for d in r.differences:
            print(f"       command {d.command} {d.range}: first difference at byte {d.byte}, "
                  f"{d.where}: recorded {d.recorded}, replayed {d.replayed} "
                  f"({d.bytes_differing} bytes differ)")
    print("bit-identical" if same else "DIFFERENT")
    return 0 if same else EXIT_DIFFERS
