"""The ``ksp`` command-line interface."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

DIST_NAME = "ksp-gateway"


def package_version() -> str:
    """Return the installed version of the ksp-gateway distribution."""
    try:
        return version(DIST_NAME)
    except PackageNotFoundError:
        return "unknown (not installed)"


def _cmd_version(args: argparse.Namespace) -> int:
    print(package_version())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ksp", description="Knowledge Sharing Protocol reference tools."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p_version = sub.add_parser("version", help="print the ksp-gateway version")
    p_version.set_defaults(func=_cmd_version)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
