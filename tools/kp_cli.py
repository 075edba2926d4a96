"""A KP on the command line, in mosquitto_pub/mosquitto_sub's spirit:

    ksp query  'SELECT ?s ?o WHERE { ?s <http://example.org/p> ?o }'
    ksp update 'INSERT DATA { <http://example.org/s> <http://example.org/p> 1 }'
    ksp sub    'SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }'
    ksp rule   install|list|remove ...
    ksp graph  create|drop|copy|move|add ...

The SIB is a URL (`--sib udp://HOST:PORT`, also `tcp://`, `tcps://`, `coap://`; default
`$KSP_SIB` or udp://127.0.0.1:7000) whose parts `-H`, `-p`, `-t` override. SPARQL comes as an
argument, from a file (`-f`) or from stdin (`-`, or nothing on a pipe). The password comes from
`$KSP_PASSWORD`, `--password-file` or a prompt, so that it is not in the process list. Exit
status: 0, 1 for an error status or an unreachable SIB, 2 for a usage or SPARQL error; always
one line on stderr, never a traceback, one wording per fault whatever the transport
(`fault_text`). `ksp sub` prints each state as one self-describing record (`write_state`).
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import getpass
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .commands import interrupted_before

DEFAULT_SIB = "udp://127.0.0.1:7000"
FORMATS = ("table", "json", "csv", "nt")


class UsageError(Exception):
    """Exit status 2: the command line or its SPARQL."""


# -- the connection ---------------------------------------------------------------------------


def port_number(text: object) -> int:
    """A port given on the command line (`-p`, or a URL's); one wording for every bad one."""
    port = str(text)
    if not (port.isdigit() and 0 < int(port) < 65536):
        raise UsageError(f"port {port}: not a port number (1 to 65535)")
    return int(port)


def sib_url(args: argparse.Namespace) -> str:
    """`--sib` (or $KSP_SIB, or the default) with `-t`, `-H`, `-p` replacing its parts."""
    given = args.sib or os.environ.get("KSP_SIB") or DEFAULT_SIB
    source = "--sib" if args.sib else "$KSP_SIB" if os.environ.get("KSP_SIB") else "default"
    # HOST:PORT alone is UDP's, as `ksp simulate-board --sib` takes it
    parts = urlsplit(given if "://" in given else "udp://" + given)
    if parts.scheme not in ("udp", "tcp", "tcps", "coap") or not parts.hostname:
        raise UsageError(f"{source} {given!r}: expected udp|tcp|tcps|coap://HOST:PORT or "
                         "HOST:PORT (UDP)")
    scheme = args.transport or parts.scheme
    host = args.host or parts.hostname
    if args.port is not None:
        port: int | None = port_number(args.port)
    else:
        url_port = parts.netloc.rpartition("]")[2].rpartition(":")
        port = port_number(url_port[2]) if url_port[1] else None
    if port is None and scheme != "coap":
        raise UsageError(f"{source} {given!r}: no port for {scheme}:// (KSP has no default "
                         "port)")
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def password_of(args: argparse.Namespace) -> str:
    """The KP's password: --password-file, $KSP_PASSWORD (empty is a password), or a prompt;
    with none of them and no terminal to prompt on, a usage error rather than an empty
    password the SIB would refuse as a wrong one."""
    if args.password_file:
        try:
            return Path(args.password_file).read_text().rstrip("\n")
        except OSError as exc:
            raise UsageError(f"--password-file: {exc.strerror}: {args.password_file}") from None
    if "KSP_PASSWORD" in os.environ:
        return os.environ["KSP_PASSWORD"]
    if sys.stdin.isatty():
        return getpass.getpass(f"password for {args.kp_id}: ")
    raise UsageError(f"no password given for -i {args.kp_id}: set $KSP_PASSWORD, give "
                     "--password-file FILE, or run on a terminal to be asked")


def prefixes_of(path: str | None) -> dict[str, str] | None:
    """Prefix names from a JSAP (`namespaces`) or TOML (`[namespaces]` or `[prefixes]`) file."""
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"--prefixes: {exc.strerror}: {path}") from None
    try:
        if path.endswith(".toml"):
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--prefixes {path}: {exc}") from None
    table = data.get("namespaces", data.get("prefixes")) if isinstance(data, dict) else None
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise UsageError(f"--prefixes {path}: no 'namespaces' (or 'prefixes') table of IRIs")
    return dict(table)


async def connected(args: argparse.Namespace):
    import ssl

    from transports import connect

    # A rule stays installed after the command exits; a subscription ends with it.
    kw: dict[str, Any] = {"prefixes": prefixes_of(args.prefixes),
                          "keep_persistent": args.command == "rule"}
    if args.kp_id:
        kw.update(kp_id=args.kp_id, password=password_of(args))
    url = sib_url(args)
    if args.cafile:
        if not url.startswith("tcps:"):
            raise UsageError("--cafile needs a tcps:// SIB")
        kw["ssl"] = ssl.create_default_context(cafile=args.cafile)
    keepalive = getattr(args, "keepalive", None)
    if keepalive is not None:
        if not 0 < keepalive < float("inf"):
            raise UsageError(f"--keepalive {keepalive:g}: must be a number of seconds above 0")
        from ksp import Timing

        kw["timing"] = Timing(keepalive=keepalive)
    kp = await connect(url, **kw)
    kp.every_graph = getattr(args, "every_graph", False)
    return kp


NO_SPARQL = "no SPARQL: give it as an argument, with -f FILE, or on stdin"
QUERY_WORDS = ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")
UPDATE_WORDS = ("INSERT", "DELETE", "WITH", "CREATE", "DROP", "COPY", "MOVE", "ADD", "LOAD",
                "CLEAR")
_PROLOGUE = re.compile(r"(?:\s+|#[^\n]*|PREFIX\s+[^\s:]*:\s*<[^>]*>|BASE\s*<[^>]*>)*", re.I)


def operation(text: str) -> tuple[str, int]:
    """The first keyword after the prologue (upper case; "" for none) and its offset."""
    at = _PROLOGUE.match(text).end()
    word = re.match(r"[A-Za-z]*", text[at:])[0].upper()
    if word in ("INSERT", "DELETE") and re.match(r"\s+DATA\b", text[at + len(word):], re.I):
        word += " DATA"
    return word, at


def sparql_of(args: argparse.Namespace) -> str:
    """The SPARQL text of the command, checked to be of the command's kind (a query for
    `query` and `sub`, an update for `update`), so that a mix-up is named in the user's
    terms rather than as a parser's expectation."""
    if args.file:
        try:
            text = Path(args.file).read_text()
        except OSError as exc:
            raise UsageError(f"-f: {exc.strerror}: {args.file}") from None
    elif args.sparql in (None, "-"):
        if args.sparql is None and sys.stdin.isatty():
            raise UsageError(NO_SPARQL)
        text = sys.stdin.read()
    else:
        text = args.sparql
    word, at = operation(text)
    if not text[at:].strip():
        raise UsageError(NO_SPARQL)
    command = args.command if args.command != "rule" else "rule install"
    if command in ("query", "sub"):
        if word.split()[0] in UPDATE_WORDS:
            other = "`ksp update`" + (", or `ksp rule install` to keep it at the SIB"
                                      if command == "sub" else "")
            raise UsageError(f"{word} is an update, not a query: run it with {other}")
        if word not in QUERY_WORDS:
            line = text.count("\n", 0, at) + 1
            column = at - (text.rfind("\n", 0, at) + 1) + 1
            found = text[at:].split(None, 1)[0][:40]
            raise UsageError(f"SPARQL syntax error (line {line}, column {column}): expected "
                             f"SELECT, ASK or CONSTRUCT, found {found!r}")
    elif command == "update" and word in QUERY_WORDS:
        raise UsageError(f"{word} is a query, not an update: run it with `ksp query` (or "
                         "`ksp sub` to follow its changes)")
    return text


# -- output -----------------------------------------------------------------------------------


def _n3(term) -> str:
    return "" if term is None else term.n3()


def _json_term(term) -> dict | None:
    """A SPARQL 1.1 Query Results JSON term."""
    from rdflib import BNode, Literal

    if term is None:
        return None
    if isinstance(term, Literal):
        out = {"type": "literal", "value": str(term)}
        if term.language:
            out["xml:lang"] = term.language
        elif term.datatype:
            out["datatype"] = str(term.datatype)
        return out
    return {"type": "bnode" if isinstance(term, BNode) else "uri", "value": str(term)}


def write_result(result, fmt: str, out=sys.stdout, **extra) -> None:
    """A query result (SelectRows, bool, or a list of triples) in `fmt`; `extra` keys go into
    each JSON line (a subscription's tid and seq)."""
    from transports.client import SelectRows

    if isinstance(result, SelectRows):
        names = [str(v) for v in result.variables]
        if fmt == "json":
            for row in result.rows:
                binding = {n: t for n, v in zip(names, row) if (t := _json_term(v)) is not None}
                out.write(json.dumps({**extra, **binding}) + "\n")
        elif fmt == "csv":
            writer = csv.writer(out, lineterminator="\r\n")  # SPARQL 1.1 CSV results
            writer.writerow(names)
            writer.writerows([["" if v is None else str(v) for v in row] for row in result.rows])
        elif fmt == "nt":
            raise UsageError("N-Triples is for CONSTRUCT results; SELECT: table, json or csv")
        else:
            cells = [[f"?{n}" for n in names]] + [[_n3(v) for v in row] for row in result.rows]
            widths = [max(len(r[k]) for r in cells) for k in range(len(names))]
            for r in cells:
                out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")
        if result.total is not None and result.total > len(result.rows):
            print(f"ksp: {len(result.rows)} of {result.total} rows (the SIB cut the result; "
                  "--all fetches the rest)", file=sys.stderr)
    elif isinstance(result, bool):
        if fmt == "json":
            out.write(json.dumps({**extra, "boolean": result}) + "\n")
        else:
            out.write(("true" if result else "false") + "\n")
    else:  # CONSTRUCT: triples
        if fmt == "json":
            for s, p, o in result:
                out.write(json.dumps({**extra, "s": _json_term(s), "p": _json_term(p),
                                      "o": _json_term(o)}) + "\n")
        elif fmt == "csv":
            writer = csv.writer(out, lineterminator="\r\n")
            writer.writerow(["s", "p", "o"])
            writer.writerows([[str(t) for t in triple] for triple in result])
        else:  # table and nt: N-Triples
            for triple in result:
                out.write(" ".join(t.n3() for t in triple) + " .\n")
    out.flush()


def write_state(ind, fmt: str, out=sys.stdout, header: bool = True) -> None:
    """One state of a subscription as one self-describing record, an empty one included:
    a JSON line with its tid, seq (null: the initial state) and the whole result (SPARQL 1.1
    JSON results: `head` and `results`, or `boolean`; CONSTRUCT: `triples`); CSV rows that
    each carry tid, seq and the state's row count (an empty state: one row of count 0, the
    header before the first state only); a table or N-Triples under a `#` line naming it."""
    from transports.client import SelectRows

    result, seq = ind.result, ind.seq
    if isinstance(result, SelectRows):
        names, rows = [str(v) for v in result.variables], list(result.rows)
    elif isinstance(result, bool):
        names, rows = ["boolean"], [[str(result).lower()]]
    else:
        names, rows = ["s", "p", "o"], list(result)
    if fmt == "json":
        record: dict[str, Any] = {"tid": ind.tid, "seq": seq}
        if isinstance(result, SelectRows):
            record["head"] = {"vars": names}
            record["results"] = {"bindings": [
                {n: t for n, v in zip(names, row) if (t := _json_term(v)) is not None}
                for row in rows]}
        elif isinstance(result, bool):
            record.update(head={}, boolean=result)
        else:
            record["triples"] = [dict(zip("spo", map(_json_term, t))) for t in rows]
        out.write(json.dumps(record) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\r\n")
        if header:
            writer.writerow(["tid", "seq", "rows", *names])
        count = 0 if isinstance(result, bool) else len(rows)
        lead = [ind.tid, "" if seq is None else seq, count]
        writer.writerows([[*lead, *("" if v is None else str(v) for v in row)]
                          for row in rows] or [lead + [""] * len(names)])
    else:
        label = "initial state" if seq is None else f"seq {seq}"
        kind = "row" if isinstance(result, SelectRows) else "triple"
        size = "" if isinstance(result, bool) else (
            f", {len(rows)} {kind}{'' if len(rows) == 1 else 's'}")
        out.write(f"# {time.strftime('%H:%M:%S')} tid {ind.tid} {label}{size}\n")
        write_result(result, fmt, out)
        return
    out.flush()


# -- commands ---------------------------------------------------------------------------------


async def cmd_query(args, kp) -> int:
    text = sparql_of(args)
    write_result(await (kp.query_all(text) if args.all else kp.query(text)), args.format)
    return 0


async def cmd_update(args, kp) -> int:
    await kp.update(sparql_of(args), confirmable=not args.non)
    return 0


async def cmd_sub(args, kp) -> int:
    """Each state of a persistent query as it arrives; Ctrl-C (or `-C N` changes) TERMINATEs it
    at the SIB before exiting."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    earlier = signal.getsignal(signal.SIGINT)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if interrupted_before(earlier):  # a Ctrl-C Python dropped while the command started
        stop.set()
    changes, first = 0, True
    args.waiting = "the subscription's first state"
    async with kp.subscribe(sparql_of(args)) as sub:
        stopping = loop.create_task(stop.wait())
        try:
            while True:
                nxt = loop.create_task(anext(sub))
                await asyncio.wait((nxt, stopping), return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()
                    break
                try:
                    ind = nxt.result()
                except StopAsyncIteration:
                    break
                write_state(ind, args.format, header=first)
                first = False
                args.waiting = f"the next change of the subscription (tid {ind.tid})"
                if ind.seq is not None:
                    changes += 1
                    if args.count and changes >= args.count:
                        break
        finally:
            stopping.cancel()
        if sub.status is not None:  # the SIB ended it (TERMINATED); the user's end is ours
            from ksp import Status

            print(f"ksp sub: the SIB ended the subscription (tid {sub.tid}): "
                  f"{Status(sub.status).name}", file=sys.stderr)
            return 1
    return 0


def _rules_file() -> Path:
    base = os.environ.get("KSP_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "ksp")
    return Path(base) / "rules.json"


def _load_rules() -> list[dict]:
    path = _rules_file()
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _save_rules(rules: list[dict]) -> None:
    path = _rules_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rules, indent=1))
    tmp.replace(path)


async def cmd_rule(args, kp) -> int:
    """Persistent updates stay at the SIB after the command exits (they belong to the KP ID,
    which a later `ksp rule remove` proves again); the ones installed from here are listed in a
    local file ($KSP_STATE_DIR, or $XDG_STATE_HOME/ksp)."""
    url, rules = sib_url(args), _load_rules()
    mine = [r for r in rules if r["sib"] == url and r["kp_id"] == args.kp_id]
    if args.action == "list":
        for r in mine:
            print(f"{r['tid']}\t{r['installed']}\t{' '.join(r['sparql'].split())}")
        return 0
    if args.action == "install":
        text = sparql_of(args)
        response = await kp.request(text, persistent=True)
        rules.append({"sib": url, "kp_id": args.kp_id, "tid": response.tid, "sparql": text,
                      "installed": time.strftime("%Y-%m-%dT%H:%M:%S")})
        _save_rules(rules)
        print(response.tid)
        return 0
    tids = set(args.tids) if args.tids else {r["tid"] for r in mine}
    for tid in sorted(tids):
        await kp.terminate(tid)
        print(f"removed {tid}")
    _save_rules([r for r in rules if not (r in mine and r["tid"] in tids)])
    return 0


async def cmd_graph(args, kp) -> int:
    await getattr(kp, args.action)(*map(_graph, args.graphs))
    return 0


def _graph(name: str):
    from rdflib import URIRef

    return None if name == "default" else URIRef(name)


COMMANDS = {"query": cmd_query, "update": cmd_update, "sub": cmd_sub, "rule": cmd_rule,
            "graph": cmd_graph}


def run(args: argparse.Namespace) -> int:
    """Run one KP command: the exit status, and at most one line on stderr."""
    from ksp.errors import KspError
    from transports import ClientError, KspStatusError

    name = f"ksp {args.command}"
    if args.command == "rule" and args.action != "list" and not args.kp_id:
        print(f"{name}: a rule belongs to a KP ID (-i ID): without one, no later command "
              "could remove it", file=sys.stderr)
        return 2
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        print(f"{name}: --timeout {args.timeout:g}: must be a number of seconds above 0",
              file=sys.stderr)
        return 2
    args.waiting = "the connection to open"  # what a timeout interrupts (cmd_sub updates it)
    started = time.monotonic()

    async def go() -> int:
        if args.command == "rule" and args.action == "list":
            return await cmd_rule(args, None)
        loop = asyncio.get_running_loop()
        end = None if args.timeout is None else loop.time() + args.timeout
        kp = await asyncio.wait_for(connected(args), args.timeout)
        args.waiting = "the SIB's answer"
        try:
            return await asyncio.wait_for(COMMANDS[args.command](args, kp),
                                          None if end is None else end - loop.time())
        finally:
            await kp.close()

    try:
        return asyncio.run(go())
    except UsageError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except KspStatusError as exc:
        print(f"{name}: the SIB answered {exc}", file=sys.stderr)
        return 1
    except (ClientError, OSError, TimeoutError) as exc:
        url = sib_url(args)
        print(f"{name}: {url}: {fault_text(exc, url, args, time.monotonic() - started)}",
              file=sys.stderr)
        return 1
    except (KspError, ValueError) as exc:  # SPARQL outside the subset, or not SPARQL
        print(f"{name}: {exc}", file=sys.stderr)
        return 2


def nothing_listens(scheme: str) -> str:
    """The one wording of "no SIB at this address" (TCP refused, ICMP port unreachable)."""
    return f"nothing listens there (no SIB running, or none taking {scheme} on this port)"


async def sib_up(url: str, within: float) -> bool:
    """Wait until something answers KSP at `url` (an ASK; a refusal counts: a SIB answered),
    for `ksp-sib ... &` started just before: a SIB still starting does not listen yet. False
    if nothing listens there within `within` seconds; another fault is raised."""
    from transports import KspStatusError, connect

    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        try:
            async with connect(url) as kp:
                await kp.query("ASK { ?s ?p ?o }")
            return True
        except KspStatusError:
            return True
        except Exception as exc:
            if not refused(exc):
                raise
            if loop.time() >= end:
                return False
        await asyncio.sleep(0.2)


def refused(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says nothing listens at the address."""
    while exc is not None:
        if isinstance(exc, ConnectionRefusedError) or "ECONNREFUSED" in str(exc) \
                or "nothing listens there" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def fault_text(exc: BaseException, url: str, args: argparse.Namespace, waited: float) -> str:
    """A transport fault in the user's terms: one wording per fault whatever the transport
    (refused over TCP, ICMP port unreachable over UDP and CoAP: nothing listens), and for a
    timeout what was waited for, how long, and the likely causes."""
    import socket
    import ssl

    scheme = url.partition(":")[0]
    chain, cause = [], exc
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in chain):
        why = next(c for c in chain if isinstance(c, ssl.SSLCertVerificationError))
        return (f"the SIB's certificate is not trusted ({why.verify_message}): "
                "--cafile PEM trusts it")
    if any(isinstance(c, ssl.SSLError) for c in chain):
        return "the TLS handshake failed: no TLS there (a plain tcp:// port?)"
    if any(isinstance(c, socket.gaierror) for c in chain):
        return "no such host"
    if refused(exc):
        return nothing_listens(scheme)
    if isinstance(exc, TimeoutError):
        limit = (f"--timeout {args.timeout:g}" if args.timeout is not None
                 else "the transport's retransmissions ran out")
        likely = ("no update changed its result" if args.waiting.startswith("the next change")
                  else f"nothing listens there, a firewall drops {scheme}, or a proxy does not "
                       "forward it")
        return f"waited {waited:.0f} s for {args.waiting} ({limit}); likely {likely}"
    text = str(exc) or type(exc).__name__
    return text.removeprefix(f"{url}: ")


def add_parsers(sub) -> None:
    """The KP commands, added to `ksp`'s subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    conn = common.add_argument_group("the SIB and the KP")
    conn.add_argument("-s", "--sib", metavar="URL",
                      help=f"udp|tcp|tcps|coap://HOST:PORT (default $KSP_SIB or {DEFAULT_SIB})")
    conn.add_argument("-H", "--host", help="the SIB's host (replaces the URL's)")
    conn.add_argument("-p", "--port", help="the SIB's port (replaces the URL's)")
    conn.add_argument("-t", "--transport", choices=("udp", "tcp", "tcps", "coap"),
                      help="the transport (replaces the URL's scheme)")
    conn.add_argument("-i", "--kp-id", metavar="ID",
                      help="KP ID (a UUID or a name): requests carry CREDENTIALS")
    conn.add_argument("--password-file", metavar="FILE",
                      help="the password (else $KSP_PASSWORD, else a prompt on a terminal)")
    conn.add_argument("--cafile", metavar="PEM", help="trust this certificate (tcps://)")
    conn.add_argument("--prefixes", metavar="FILE",
                      help="prefix names from a JSAP (.jsap/.json: namespaces) or TOML file")
    conn.add_argument("--timeout", type=float, default=None, metavar="S",
                      help="give up after S seconds, S > 0 (default: never for sub, else the "
                           "transport's own retransmission limits)")
    from_file = argparse.ArgumentParser(add_help=False)
    from_file.add_argument("-f", "--file", metavar="FILE", help="read the SPARQL text from FILE")
    text = argparse.ArgumentParser(add_help=False, parents=[from_file])
    text.add_argument("sparql", nargs="?", metavar="SPARQL",
                      help="the SPARQL text, or - for stdin")
    text.add_argument("--every-graph", action="store_true",
                      help="text that names no graph reads and deletes every graph (KSP's "
                           "reading), not the default graph (SPARQL's)")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("-o", "--format", choices=FORMATS, default=None,
                     help="table (default on a terminal), json (lines), csv, nt (CONSTRUCT)")

    def add(name, help_, parents, **kw):
        p = sub.add_parser(name, help=help_, parents=parents, description=help_, **kw)
        p.set_defaults(func=_dispatch)
        return p

    p = add("query", "run a SELECT, ASK or CONSTRUCT and print its result", [common, text, out])
    p.add_argument("-a", "--all", action="store_true",
                   help="SELECT: fetch every row, page by page, if the SIB cuts the result")
    p = add("update", "run a SPARQL update (DATA, pattern or graph management)", [common, text])
    p.add_argument("-n", "--non", action="store_true",
                   help="send it NON (no answer awaited; failures not reported)")
    p = add("sub", "subscribe: print each state of a persistent query as it arrives; Ctrl-C "
                   "terminates it at the SIB", [common, text, out])
    p.add_argument("-C", "--count", type=int, metavar="N", help="exit after N changes")
    p.add_argument("--keepalive", type=float, default=None, metavar="S",
                   help="over UDP, ask the SIB after S seconds without a change whether the "
                        "subscription still runs (default 25; the end of the subscription or of "
                        "the SIB is known within S + 21 s)")
    rule = sub.add_parser("rule", help="install, list or remove persistent updates (rules)",
                          description=cmd_rule.__doc__).add_subparsers(
        dest="action", metavar="ACTION", required=True)
    p = rule.add_parser("install", help="install a rule; prints its TID",
                        parents=[common, text])
    p.set_defaults(func=_dispatch, command="rule")
    p = rule.add_parser("list", help="the rules installed from here for this SIB and KP ID",
                        parents=[common])
    p.set_defaults(func=_dispatch, command="rule")
    p = rule.add_parser("remove", help="TERMINATE rules (default: every one installed from "
                                       "here for this SIB and KP ID)", parents=[common])
    p.add_argument("tids", nargs="*", type=int, metavar="TID")
    p.set_defaults(func=_dispatch, command="rule")
    graph = sub.add_parser("graph", help="create, drop, copy, move or add named graphs"
                           ).add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, what in (("create", "create named graphs"), ("drop", "drop named graphs")):
        p = graph.add_parser(action, help=what, parents=[common])
        p.add_argument("graphs", nargs="+", metavar="GRAPH", help="graph IRIs")
        p.set_defaults(func=_dispatch, command="graph")
    for action in ("copy", "move", "add"):
        p = graph.add_parser(action, help=f"{action.upper()} SOURCE TO TARGET", parents=[common])
        p.add_argument("graphs", nargs=2, metavar="GRAPH", help="SOURCE TARGET: IRIs or "
                                                                "'default'")
        p.set_defaults(func=_dispatch, command="graph")


def _dispatch(args: argparse.Namespace) -> int:
    if getattr(args, "format", "table") is None:
        args.format = "table" if sys.stdout.isatty() else "json"
    return run(args)
