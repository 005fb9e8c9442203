"""``dvsdk``: ``dvsdk --version``, ``dvsdk doctor``, ``dvsdk info``, ``dvsdk clock``."""

from __future__ import annotations

import argparse
import sys

from . import Parser, entry, positive_int

#: every subcommand and what it does (``dvsdk --help`` lists them all)
COMMANDS = {
    "doctor": "check device nodes, permissions, DMA memory, registers; with a net.bin, "
              "that it fits the device",
    "info": "print what the device reports (the conv clock, the kick protocol, sysfs keys)",
    "clock": "show the conv clock, or set it to MHZ (30..400) where DMP's kernel module "
             "has a writable conv_freq",
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
  dvsdk clock 300 --device dv://
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


def _clock(info) -> str:
    """``"300 MHz (sysfs conv_freq)"``: the conv clock and where it comes from."""
    source = info.extra.get("clock_source") or ("simulated" if info.simulated else
                                                 "sysfs conv_freq" if info.backend == "dv"
                                                 else "")
    if source == "sysfs":
        source = "sysfs conv_freq"
    elif source == "url":
        source = "the URL's clock_mhz"
    if not info.conv_freq:
        return "unknown" + (f" ({source})" if source and source != "unknown" else "")
    return f"{info.conv_freq} MHz" + (f" ({source})" if source else "")


def build_parser() -> Parser:
    p = Parser(prog="dvsdk", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
               description="The DMP DV700 SDK.")
    p.add_argument("--version", action="store_true", help="SDK, net.bin and hardware versions")
    p.add_argument("--device", default=None, help="device URL (connects for --version/info)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for name, text in COMMANDS.items():
        sp = sub.add_parser(name, help=text, description=text, add_help=name not in OWN_PARSER)
        if name in ("info", "clock"):
            sp.add_argument("--device", default=argparse.SUPPRESS, help="device URL")
        if name == "clock":
            sp.add_argument("mhz", nargs="?", type=positive_int, default=None,
                            help="the conv clock to set, in MHz (30..400, §10.9)")
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
            info = dev.info()
            print(f"{'conv clock':16s} {_clock(info)}")
            for key, value in info.as_dict().items():
                print(f"{key:16s} {value}")
        return 0
    if args.command == "clock":
        from ..driver.device import open_device

        with open_device(args.device) as dev:
            before = _clock(dev.info())
            if args.mhz is None:
                print(f"conv clock {before}")
                return 0
            after = dev.set_clock(args.mhz)
            print(f"conv clock {after} MHz (was {before})")
        return 0
    p.print_help()
    return 2


def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk", main, argv)


if __name__ == "__main__":
    sys.exit(run())
