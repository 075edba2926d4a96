"""`ksp replay FILE --to udp://HOST:PORT`: re-send the KP side of a capture to a SIB (or
bridge) and compare its answers with the recorded ones.

Every KP of the capture (its KP ID, else its address) gets its own connection; its requests go
out in capture order with fresh transaction IDs (the link picks them; a TERMINATE names the new
ID of the operation it ends), retransmissions and ACKs in the capture are left to the link, and
after each request the replay waits until every persistent operation has as many INDs as the
capture shows by then. Compared: each RES's status and result, and each operation's INDs in
order — rows as a multiset unless the request orders them (with LIMIT and no ORDER BY only the
count), CONSTRUCT triples as a set, blank node labels ignored. Sealed requests (wire format 13)
cannot be replayed without the KP's key (the replay window refuses them): they are counted and
skipped.

Only what the KP side caused is expected: a capture of `ksp-sib --pcap` stopped by SIGTERM ends
with the TERMINATED INDs of the SIB's shutdown (every operation still active then), which no
request caused. Those — TERMINATED INDs after the capture's last KP request and its RES — are
counted as the recorded SIB's shutdown, not waited for; the replayed SIB may still send them
(a DROP of a graph ends its subscriptions the same way) without that being a difference.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ksp import Request, Response, Status, Tx
from ksp.model import ConstructResult, SelectResult
from ksp.terms import IRI, BNode, Literal

from .capture_read import Captured, annotate, messages
from .kp_cli import UsageError, nothing_listens, port_number, refused, sib_up

_XSD = "http://www.w3.org/2001/XMLSchema#"
_BARE = {_XSD + "integer", _XSD + "decimal", _XSD + "double", _XSD + "boolean"}


def term_text(term) -> str:
    """A term as short SPARQL-like text; every blank node is `_:b` (labels differ by run)."""
    if term is None:
        return "UNDEF"
    if isinstance(term, IRI):
        return f"<{term}>"
    if isinstance(term, BNode):
        return "_:b"
    if isinstance(term, Literal):
        if term.lang:
            return f'"{term.lexical}"@{term.lang}'
        if term.datatype in _BARE:
            return term.lexical
        if term.datatype in (None, _XSD + "string"):
            return f'"{term.lexical}"'
        return f'"{term.lexical}"^^<{term.datatype}>'
    return repr(term)


def _row(values) -> str:
    return "(" + " ".join(term_text(v) for v in values) + ")"


@dataclass
class Expected:
    """One KP request of the capture and what the SIB answered then."""

    item: Captured
    res: Response | None = None
    res_time: float | None = None  # when the capture shows the RES
    inds: list[Response] = field(default_factory=list)  # its INDs, duplicates removed
    ind_times: list[float] = field(default_factory=list)  # when the capture shows each
    shutdown: Response | None = None  # the TERMINATED IND of the recorded SIB's shutdown


@dataclass
class Report:
    requests: int = 0
    skipped_sealed: int = 0
    shutdown: int = 0  # operations the recorded SIB's shutdown ended (not expected here)
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def text(self) -> str:
        head = (f"{self.requests} requests replayed"
                + (f", {self.skipped_sealed} sealed skipped" if self.skipped_sealed else "")
                + (f", {self.shutdown} operations ended by the recorded SIB's shutdown "
                   "(not expected)" if self.shutdown else ""))
        if self.ok:
            return head + ": every answer as recorded"
        return head + f": {len(self.differences)} differences\n" + "\n".join(
            "  " + d for d in self.differences)


def expectations(items: list[Captured]) -> tuple[list[Expected], int]:
    """The KP requests of a capture (retransmissions dropped) with their recorded answers."""
    out: list[Expected] = []
    open_res: dict[tuple[str, int], Expected] = {}
    open_ind: dict[tuple[str, int], Expected] = {}
    seen: set[tuple[str, int, bytes]] = set()
    sealed = 0
    for item in items:
        msg = item.message
        if not item.from_sib:
            if item.sealed and isinstance(msg, Request):
                sealed += 1
                continue
            if not isinstance(msg, Request):
                continue
            key = (item.kp, msg.tid, item.inner)
            if key in seen:
                continue  # a retransmission
            seen.add(key)
            exp = Expected(item)
            out.append(exp)
            open_res[(item.kp, msg.tid)] = exp
            if msg.tx.persistent:
                open_ind[(item.kp, msg.tid)] = exp
        elif isinstance(msg, Response):
            if msg.indication:
                exp = open_ind.get((item.kp, msg.tid))
                if exp is not None and (msg.seq is None or all(r.seq != msg.seq
                                                                for r in exp.inds)):
                    exp.inds.append(msg)
                    exp.ind_times.append(item.time)
            else:
                exp = open_res.pop((item.kp, msg.tid), None)
                if exp is not None and exp.res is None:
                    exp.res = msg
                    exp.res_time = item.time
    _shutdown(out)
    return out, sealed


def _shutdown(plan: list[Expected]) -> None:
    """Move the TERMINATED INDs that came after the last KP request and its RES — the SIB
    shutting down, not anything the KPs asked for — out of what the replay expects."""
    if not plan:
        return
    last = plan[-1]
    after = max(last.item.time, last.res_time or last.item.time)
    for exp in plan:
        if exp.inds and exp.inds[-1].status == Status.TERMINATED and exp.ind_times[-1] > after:
            exp.shutdown = exp.inds.pop()
            exp.ind_times.pop()


def normal(response: Response | None, request: Request) -> object:
    """What must be equal between the recorded and the replayed answer."""
    if response is None:
        return None
    result = response.result
    mod = request.options.modifier
    ordered = mod is not None and mod.order_var is not None
    if isinstance(result, SelectResult):
        rows = [_row(r) for r in result.rows]
        if mod is not None and mod.limit is not None and not ordered:
            body: object = ("rows", len(rows))
        else:
            body = rows if ordered else sorted(rows)
        return response.status, result.variables, body
    if isinstance(result, ConstructResult):
        return response.status, sorted({_row(t) for t in result.triples})
    return response.status, None if result is None else repr(result)


class _Collector:
    """The sink of one replayed persistent operation: its INDs in arrival order."""

    def __init__(self) -> None:
        self.inds: list[Response] = []
        self.ended: Status | int | None = None
        self.changed = asyncio.Event()

    def deliver(self, response: Response) -> None:
        self.inds.append(response)
        self.changed.set()

    def end(self, status) -> None:
        self.ended = status
        self.inds.append(Response(0, Status(status)))
        self.changed.set()

    def fail(self, exc: BaseException) -> None:
        self.ended = Status.TERMINATED
        self.changed.set()


class Unreachable(Exception):
    """Nothing listens at the replay's target: said once, not as a difference per request."""


async def _open(url: str):
    parts = urlsplit(url)
    host, port, scheme = parts.hostname or "127.0.0.1", parts.port, parts.scheme
    if scheme == "udp":
        from transports.udp import open_udp_link
        return await open_udp_link(host, port)
    if scheme == "tcp":
        from transports.tcp import open_tcp_link
        return await open_tcp_link(host, port)
    if scheme == "coap":
        from transports.coap_client import open_coap_link
        return await open_coap_link(host, port or 5683)
    raise ValueError(f"{url}: udp://, tcp:// or coap://")


async def replay(path: str, url: "str | dict[str, str]", *, sib_ports=None,
                 timeout: float = 10.0, wait: float = 0.0) -> Report:
    """Replay the capture at `path` against the SIB at `url` (or, per transport the KP used in
    the capture, `{"udp": url, "tcp": url, "coap": url}`); the differences found. `wait`:
    seconds to wait for a SIB that does not listen yet (one starting), then `Unreachable`."""
    items = annotate(messages(path, sib_ports))
    for target in ([url] if isinstance(url, str) else dict.fromkeys(url.values())):
        if not await sib_up(target, wait):
            raise Unreachable(target)
    plan, sealed = expectations(items)
    report = Report(skipped_sealed=sealed, shutdown=sum(e.shutdown is not None for e in plan))
    links: dict[str, object] = {}
    new_tid: dict[tuple[str, int], int] = {}
    running: list[tuple[Expected, _Collector]] = []
    try:
        for step, exp in enumerate(plan):
            item, req = exp.item, exp.item.message
            assert isinstance(req, Request)
            link = links.get(item.kp)
            if link is None:
                target = url if isinstance(url, str) else url.get(item.transport)
                if target is None:
                    raise ValueError(f"no URL to replay {item.transport} traffic to")
                try:
                    link = links[item.kp] = await _open(target)
                except OSError as exc:
                    if refused(exc):
                        raise Unreachable(target) from exc
                    raise
            at = f"{item.kp} tid {req.tid} {req.tx.name} (at {item.time - items[0].time:.6f} s)"
            if req.tx is Tx.TERMINATE:
                req = req._replace(tid=new_tid.get((item.kp, req.tid), req.tid))
            if exp.res is not None and exp.res.status is Status.ECHO_REQUIRED:
                continue  # the capture's address validation: this client validates its own
            if req.options.echo is not None:  # a value of the recorded SIB's, stale here
                req = req._replace(options=req.options._replace(echo=None))
            sink = _Collector() if req.tx.persistent else None
            report.requests += 1
            try:
                got = await asyncio.wait_for(link.request(req, sink), timeout)
            except TimeoutError:
                report.differences.append(f"{at}: no answer within {timeout:g} s (--timeout)")
                continue
            except Exception as exc:  # noqa: BLE001 (a broken link: a difference)
                if refused(exc):
                    raise Unreachable(target) from exc
                report.differences.append(f"{at}: no answer ({type(exc).__name__}: {exc})")
                continue
            if got is not None:
                new_tid[(item.kp, exp.item.message.tid)] = got.tid
            want, have = normal(exp.res, req), normal(got, req)
            if want != have:
                report.differences.append(f"{at}: RES {_diff(want, have)}")
            if sink is not None:
                running.append((exp, sink))
            # the INDs the capture shows before the next request, before sending it
            then = plan[step + 1].item.time if step + 1 < len(plan) else float("inf")
            for op, col in running:
                await _wait(col, sum(1 for t in op.ind_times if t <= then), timeout)
        for op, col in running:
            req = op.item.message
            want = [normal(r, req) for r in op.inds]
            have = [normal(r, req) for r in col.inds]
            if op.shutdown is not None and have[len(want):] == [normal(op.shutdown, req)]:
                have.pop()  # ended here too, as by the recorded shutdown (a DROP, say)
            if want != have:
                at = f"{op.item.kp} tid {req.tid} {req.tx.name}"
                lines = [f"{at}: {len(want)} INDs recorded, {len(have)} now"]
                for n, (w, h) in enumerate(zip(want, have), 1):
                    if w != h:
                        lines.append(f"    IND {n}: {_diff(w, h)}")
                for n, w in enumerate(want[len(have):], len(have) + 1):
                    lines.append(f"    IND {n} missing: {_show(w)}")
                for n, h in enumerate(have[len(want):], len(want) + 1):
                    lines.append(f"    IND {n} extra: {_show(h)}")
                report.differences.append("\n".join(lines))
    finally:
        for link in links.values():
            await link.close()
    return report


async def _wait(col: _Collector, n: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while len(col.inds) < n and loop.time() < end:
        col.changed.clear()
        try:
            await asyncio.wait_for(col.changed.wait(), end - loop.time())
        except asyncio.TimeoutError:
            return


def _show(value: object) -> str:
    """One answer as text: its status name, then its rows or triples."""
    if not isinstance(value, tuple):
        return repr(value)
    status, *rest = value
    parts = [Status(status).name]
    for part in rest:
        if isinstance(part, list):
            parts.append("{" + ", ".join(part[:20]) + (", …" if len(part) > 20 else "") + "}")
        elif part is not None and not isinstance(part, int):
            parts.append(str(part))
    return " ".join(parts)


def _diff(want, have) -> str:
    """What differs between two answers, rows/triples first (missing and extra)."""
    if isinstance(want, tuple) and isinstance(have, tuple) and isinstance(want[-1], list) \
            and isinstance(have[-1], list):
        missing = [r for r in want[-1] if r not in have[-1]]
        extra = [r for r in have[-1] if r not in want[-1]]
        if missing or extra:
            return (f"recorded {_show(want)}, now {_show(have)}; missing {missing[:10]}, "
                    f"extra {extra[:10]}")
    return f"recorded {_show(want)}, now {_show(have)}"


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="re-send a capture's KP side to a SIB and compare answers",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("file", metavar="FILE", help="pcap/pcapng capture")
    p.add_argument("--to", "--sib", "-s", dest="to", required=True, metavar="URL",
                   help="udp://, tcp:// or coap://HOST:PORT (also --sib, -s, as the KP commands)")
    p.add_argument("--sib-port", type=int, action="append", metavar="N",
                   help="a port the recorded SIB listened on (default 7000, 7001, 5683)")
    p.add_argument("--timeout", type=_seconds, default=10.0, metavar="S",
                   help="how long to wait for each answer, S > 0 (default 10)")
    p.add_argument("--wait", type=_seconds, default=30.0, metavar="S",
                   help="how long to wait for a SIB that does not listen yet, one just started "
                        "(default 30)")
    p.set_defaults(func=_main)


def _seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: must be a number of seconds above 0")
    return value


def _main(args) -> int:
    import sys

    from transports.pcap import PcapError

    try:
        parts = urlsplit(args.to)
        if parts.scheme not in ("udp", "tcp", "coap") or not parts.hostname:
            raise UsageError(f"--to {args.to!r}: expected udp|tcp|coap://HOST:PORT")
        url_port = parts.netloc.rpartition("]")[2].rpartition(":")
        if url_port[1]:
            port_number(url_port[2])
        report = asyncio.run(replay(args.file, args.to, sib_ports=args.sib_port or None,
                                    timeout=args.timeout, wait=args.wait))
    except UsageError as exc:
        print(f"ksp replay: {exc}", file=sys.stderr)
        return 2
    except Unreachable as exc:
        url = str(exc)
        print(f"ksp replay: {url}: {nothing_listens(url.partition(':')[0])}", file=sys.stderr)
        return 1
    except (OSError, PcapError, ValueError) as exc:
        print(f"ksp replay: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    return 0 if report.ok else 1
