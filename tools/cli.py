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


#: `ksp bench SUITE [ARGS]`: the module in tools/bench/ that runs SUITE, relative to this package
#: (imported on use only, since the benchmarks import pyoxigraph and rdflib).
BENCH_SUITES = {
    "backfill": ".bench.backfill",
    "broker-store": ".bench.broker_store",
    "codec": ".bench.codec",
    "firmware": ".bench.firmware",
    "fuzz": ".bench.fuzz",
    "bridge": ".bench.bridge",
    "bridge-soak": ".bench.bridge_soak",
    "fanout": ".bench.fanout",
    "indicate": ".bench.indicate",
    "isolation": ".bench.isolation",
    "keepalive": ".bench.keepalive",
    "rate": ".bench.rate",
    "request": ".bench.request",
    "ingest": ".bench.ingest",
    "ingest-files": ".bench.ingest_files",
    "secure": ".bench.secure",
    "sepa": ".bench.sepa",
    "sib": ".bench.sib",
    "soak": ".bench.soak",
    "spark-start": ".bench.spark_start",
    "stall": ".bench.stall",
    "sparql": ".bench.sparql",
    "transport": ".bench.transport",
    "transport-soak": ".bench.transport_soak",
    "validation": ".bench.validation",
    "wire": ".bench.wire",
}


def _cmd_bench(args: argparse.Namespace) -> int:
    from importlib import import_module

    suite = import_module(BENCH_SUITES[args.suite], __package__)
    return suite.main(args.args, prog=f"ksp bench {args.suite}")


def _cmd_decode(args: argparse.Namespace) -> int:
    """`ksp decode HEX`: the annotated field table (ksp.reference.explain, from the construct grammar),
    then the message as `ksp.codec` decodes it; exit code 2 for invalid bytes."""
    from .decode import decode_command

    if args.pcap is not None:
        from .capture_read import print_capture
        from transports.pcap import PcapError

        try:
            return print_capture(args.pcap, kp=args.kp, tx=args.type, brief=args.brief,
                                 sib_ports=args.sib_port or None)
        except BrokenPipeError:
            raise  # `| head`: main() ends quietly
        except (OSError, PcapError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.hex is None:
        print("error: give the message in HEX (or - for stdin), or --pcap FILE", file=sys.stderr)
        return 2
    if args.answers is not None and not args.from_sib:
        print("error: --answers only applies with --from-sib (a RES/IND)", file=sys.stderr)
        return 2
    text = sys.stdin.read() if args.hex == "-" else args.hex
    return decode_command(text, tcp=args.tcp, from_sib=args.from_sib, answers=args.answers)


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.which == "greenhouse":  # a live ksp-sib with the greenhouse KPs (tools/greenhouse.py)
        from .greenhouse import main as greenhouse

        return greenhouse(args.args, prog="ksp demo greenhouse")
    from .demo import run

    return run()


def _cmd_flash(args: argparse.Namespace) -> int:
    from .flash import run

    return run(args)


def _cmd_simulate_board(args: argparse.Namespace) -> int:
    from .flash import simulate_module

    return simulate_module().main(args.args, prog="ksp simulate-board")


def _cmd_dissector(args: argparse.Namespace) -> int:
    from .resources import dissector

    print(dissector())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ksp", description="Knowledge Sharing Protocol reference tools."
    )
    parser.add_argument("--version", action="version", version=f"ksp {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p_version = sub.add_parser("version", help="print the ksp-gateway version")
    p_version.set_defaults(func=_cmd_version)

    p_bench = sub.add_parser("bench", help="run a benchmark (tools/bench/) and print its table")
    p_bench.add_argument("suite", choices=sorted(BENCH_SUITES), help="which benchmark")
    p_bench.add_argument("args", nargs=argparse.REMAINDER,
                         help="the benchmark's own options (see `ksp bench SUITE --help`)")
    p_bench.set_defaults(func=_cmd_bench)

    p_demo = sub.add_parser("demo", help="the Smart Greenhouse: `wire` (default) its messages "
                                         "annotated; `greenhouse` live on ksp-sib --memory")
    p_demo.add_argument("which", nargs="?", choices=("wire", "greenhouse"), default="wire")
    p_demo.add_argument("args", nargs=argparse.REMAINDER, help="greenhouse: its options")
    p_demo.set_defaults(func=_cmd_demo)

    p_decode = sub.add_parser(
        "decode", help="annotate and decode one KSP message given in hex",
        description="Print every field of a KSP message (offset, bytes, field path, meaning), "
                    "then the decoded message; for invalid bytes, the DecodeError with its "
                    "status and field path (exit code 2).")
    p_decode.add_argument("hex", metavar="HEX", nargs="?",
                          help="the message in hex (whitespace allowed), or - to read stdin")
    p_decode.add_argument("--pcap", metavar="FILE",
                          help="every KSP message of a capture (pcap/pcapng: ksp-sib --pcap, "
                               "ksp capture, tcpdump, Wireshark), each RES/IND decoded by its "
                               "request's type")
    p_decode.add_argument("--kp", metavar="KP", help="with --pcap: only this KP (KP ID in hex, "
                                                    "its name, or HOST:PORT)")
    p_decode.add_argument("--type", metavar="TX", help="with --pcap: only this transaction type "
                                                       "(SELECT, ACK, IND, RES, ...)")
    p_decode.add_argument("--sib-port", type=int, action="append", metavar="N",
                          help="with --pcap: a port the SIB listens on (default 7000, 7001, "
                               "5683; repeat for several)")
    p_decode.add_argument("--brief", action="store_true", help="with --pcap: one line each")
    p_decode.add_argument("--tcp", action="store_true",
                          help="TCP framing (8-byte header with Length); default UDP")
    p_decode.add_argument("--from-sib", action="store_true",
                          help="a SIB→KP message (RES/IND); default KP→SIB (REQ/ACK)")
    p_decode.add_argument("--answers", metavar="TX",
                          help="with --from-sib: the transaction type of the request answered "
                               "(name such as SELECT, or code), needed to read a result")
    p_decode.set_defaults(func=_cmd_decode)

    from .flash import add_arguments as flash_arguments

    p_flash = sub.add_parser(
        "flash", help="precompile the device firmware (mpy-cross) and copy it to a board (mpremote)")
    flash_arguments(p_flash)
    p_flash.set_defaults(func=_cmd_flash)

    p_sim = sub.add_parser(
        "simulate-board", add_help=False,
        help="run the device firmware's agents on CPython with simulated boards against a SIB "
             "(or, --mqtt, publishing telemetry to an MQTT broker)")
    p_sim.add_argument("args", nargs=argparse.REMAINDER,
                       help="CONFIG... [--sib HOST:PORT | --mqtt mqtt://HOST[:PORT]] "
                            "[--period S] [--values V,...] [--readings N] "
                            "(see `ksp simulate-board --help`)")
    p_sim.set_defaults(func=_cmd_simulate_board)

    p_dissector = sub.add_parser(
        "dissector", help="print the path of the Wireshark dissector: "
                          "tshark -X lua_script:$(ksp dissector) -r CAPTURE")
    p_dissector.set_defaults(func=_cmd_dissector)

    from .capture import add_parser as capture_command

    capture_command(sub)

    from .replay import add_parser as replay_command

    replay_command(sub)

    from .telemetry import add_parser as telemetry_command

    telemetry_command(sub)

    from .kp_cli import add_parsers as kp_commands

    kp_commands(sub)  # query, update, sub, rule, graph

    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["simulate-board"]:  # all its arguments are its own (REMAINDER drops options)
        return _cmd_simulate_board(argparse.Namespace(args=argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `ksp decode ... | head`: the reader has all it wants
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
