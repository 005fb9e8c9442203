"""``dvsdk``: ``dvsdk --version``, ``dvsdk doctor``, ``dvsdk info``."""

from __future__ import annotations

import argparse
import sys

from . import Parser, entry

#: every subcommand and what it does (``dvsdk --help`` lists them all)
COMMANDS = {
    "doctor": "check device nodes, permissions, DMA memory, registers; with a net.bin, "
              "that it fits the device",
    "info": "print what the device reports (sysfs keys)",
    "eval": "accuracy on a dataset (top-1/top-5, mIoU), locally, on boards or a cluster",
    "analyze": "per-layer error of a net.bin against its source model",
    "replay": "re-execute a recording (dvsdk-run --record) and diff it bit by bit",
}

#: subcommands with their own parser (and --help): module name under dvsdk.cli
OWN_PARSER = {"doctor": "doctor", "eval": "eval", "analyze": "analyze", "replay": "replay"}

EPILOG = """examples:
  dvsdk --version --device sim://
  dvsdk doctor --device uio:// model.bin
  dvsdk info --device sim://?ub_size=655360
"""


def _version(device_url: str | None) -> str:
    from .. import __version__
    from ..netfile import FORMAT_VERSION

    line = f"dvsdk {__version__}, net.bin format {FORMAT_VERSION}"
    if device_url:
        from ..driver.device import open_device

        with open_device(device_url) as dev:
            info = dev.info()
            line += (f", device {info.backend} hw_version {info.hw_version:04x} "
                     f"svn {info.svn_version} ub_size {info.ub_size} mac_num {info.mac_num} "
                     f"conv_freq {info.conv_freq} MHz")
    return line


def build_parser() -> Parser:
    p = Parser(prog="dvsdk", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
               description="The DMP DV700 SDK.")
    p.add_argument("--version", action="store_true", help="SDK, net.bin and hardware versions")
    p.add_argument("--device", default=None, help="device URL (connects for --version/info)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for name, text in COMMANDS.items():
        sp = sub.add_parser(name, help=text, description=text, add_help=name not in OWN_PARSER)
        if name == "info":
            sp.add_argument("--device", default=argparse.SUPPRESS, help="device URL")
    return p


def main(argv: list[str]) -> int:
    rest = [a for a in argv if a != "--debug"]
    if rest and rest[0] in OWN_PARSER:  # they have their own parser (and --help)
        import importlib

        module = importlib.import_module(f"{__package__}.{OWN_PARSER[rest[0]]}")
        return module.main(rest[1:])
    p = build_parser()
    args = p.parse_args(argv)
    if args.version:
        print(_version(args.device))
        return 0
    if args.command == "info":
        from ..driver.device import open_device

        with open_device(args.device) as dev:
            for key, value in dev.info().as_dict().items():
                print(f"{key:16s} {value}")
        return 0
    p.print_help()
    return 2


def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk", main, argv)


if __name__ == "__main__":
    sys.exit(run())
