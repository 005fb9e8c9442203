"""``dvsdk``: ``dvsdk --version``, ``dvsdk doctor``, ``dvsdk info``, ``dvsdk eval``,
``dvsdk analyze``."""

from __future__ import annotations

import argparse
import sys

from . import entry

EPILOG = """commands:
  doctor [--device URL] [net.bin]   check device nodes, permissions, DMA memory, registers
  info [--device URL]               print what the device reports (sysfs keys)
  eval net.bin DATASET              accuracy on a dataset (top-1/top-5, mIoU); --help for more
  analyze net.bin --reference MODEL per-layer error against the source model; --help for more

examples:
  dvsdk --version --device sim://
  dvsdk doctor --device uio:// model.bin
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


def main(argv: list[str]) -> int:
    if argv and argv[0] == "doctor":
        from .doctor import main as doctor_main

        return doctor_main([a for a in argv[1:] if a != "--debug"])
    if argv and argv[0] == "analyze":
        from .analyze import main as analyze_main

        return analyze_main(argv[1:])
    if argv and argv[0] == "eval":
        from .eval import main as eval_main

        return eval_main(argv[1:])
    p = argparse.ArgumentParser(prog="dvsdk", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="The DMP DV700 SDK.")
    p.add_argument("command", nargs="?", choices=("info",), help="see below")
    p.add_argument("--version", action="store_true", help="SDK, net.bin and hardware versions")
    p.add_argument("--device", default=None, help="device URL (connects for --version/info)")
    p.add_argument("--debug", action="store_true")
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
