"""The device side of the KSP wire format (docs/wire-format.md), for MicroPython.

Encodes what a board sends — REQs (DATA and pattern updates, SELECT/ASK and their persistent
forms, TERMINATE, RESET; options PREFIX, DELETE/INSERT/QUERY GRAPH, FILTER, SOLUTION MODIFIER,
MAX RESPONSE SIZE, CREDENTIALS, ECHO, EPOCH) and ACKs — and decodes what it receives: the status
of any RES/IND, the SELECT or ASK result, the value an ECHO REQUIRED RES asks to be echoed and
the epochs of a NUMBER BEHIND RES, and the epoch of the request a UDP RES answers. `decode` reads straight from the receive buffer (a
memoryview is fine), so a board needs one preallocated buffer of its MAX RESPONSE SIZE.
Terms: an IRI is a str, a variable an int (its index), a literal a `Lit`, a blank node a
`BNode` (plain values keep a board's heap small). Canonical encoding (§10) with the prefix list
the caller gives; the CPython codec in `ksp/` is the reference and the golden vectors prove
agreement (tests/test_firmware_vectors.py).
"""
import struct

from micropython import const

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
XSD_STRING = XSD + "string"
XSD_INTEGER = XSD + "integer"
XSD_FLOAT = XSD + "float"
XSD_DOUBLE = XSD + "double"
XSD_DATETIME = XSD + "dateTime"
XSD_BOOLEAN = XSD + "boolean"
RDF_LANGSTRING = RDF + "langString"
#: Where every reserved word (table 3.5, kspfw/reserved.py, loaded for such IRIs only) lives.
_W3 = "http://www.w3.org/"


class Lit:
    """A literal: lexical form, datatype IRI, language tag (then datatype is rdf:langString)."""

    def __init__(self, value, datatype=XSD_STRING, lang=None):
        self.value = value
        self.datatype = RDF_LANGSTRING if lang is not None else datatype
        self.lang = lang

    def __eq__(self, other):
        return (isinstance(other, Lit) and self.value == other.value
                and self.datatype == other.datatype and self.lang == other.lang)


class BNode:
    """A blank node, by label (no `_:`)."""

    def __init__(self, label):
        self.label = label

    def __eq__(self, other):
        return isinstance(other, BNode) and self.label == other.label


VERSION = const(1)
SELECT = const(0x07)
ASK = const(0x08)
TERMINATE = const(0x10)
RESET = const(0x11)
_CONSTRUCT = const(0x09)
_BAD_DATA = const(4)
#: RES status: send the request again, once, under a new TID with this RES's value as ECHO.
ECHO_REQUIRED = const(0x0F)
_ECHO = const(0x0A)  # the ECHO option's type
_ECHO_MAX = const(10)
#: RES status: the request's number is behind the SIB's (§15); result (epoch, next epoch).
NUMBER_BEHIND = const(0x10)
_EPOCH = const(0x0B)  # the EPOCH option's type
_RES_EPOCH = const(0x40)  # type byte bit of a UDP RES naming its request's epoch (§15.6)
# What reading past the end or bad bytes raise (MicroPython's struct raises ValueError).
_FAILURES = (IndexError, ValueError, getattr(struct, "error", ValueError))


class KspError(Exception):
    """Bytes that are not valid KSP; `status` is the KSP status code for them."""

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


class Response:
    """A RES or IND. `result`: None (no Data field), a bool (ASK), a `results.Select`, the
    value to echo (bytes) of an ECHO REQUIRED RES, or (epoch, next epoch) of a NUMBER BEHIND
    RES. `epoch`: the epoch of the request a UDP RES answers (§15.6), None for epoch 0."""


    def __init__(self, tid, status, ind, seq, result, epoch=None):
        self.tid = tid
        self.status = status
        self.ind = ind
        self.seq = seq
        self.result = result
        self.epoch = epoch


# ------------------------------------------------------------------------------------------
# Encoding


def _uri_len(out, n):
    if n < 0x80:
        out.append(n)
    elif n < 0x8000:
        out.append(0x80 | n & 0x7F)
        out.append(n >> 7)
    else:
        raise ValueError("URI over 32767 bytes")


def _text(out, s):
    raw = s.encode()
    n = len(raw)
    if n < 0x40:
        out.append(n)
    elif n < 0x4000:
        out.append(0x40 | n & 0x3F)
        out.append(n >> 6)
    elif n < 0x400000:
        out.extend(bytes((0x80 | n & 0x3F, n >> 6 & 0xFF, n >> 14)))
    elif n < 0x40000000:
        out.extend(bytes((0xC0 | n & 0x3F, n >> 6 & 0xFF, n >> 14 & 0xFF, n >> 22)))
    else:
        raise ValueError("string over 2^30 - 1 bytes")
    out.extend(raw)


def _uri(out, iri, prefixes):
    """URI field: the longest matching prefix (lowest index on a tie), else index 0."""
    best = blen = 0
    for i, p in enumerate(prefixes):
        if len(p) > blen and iri.startswith(p):
            best, blen = i + 1, len(p)
    raw = iri[blen:].encode()
    out.append(best)
    _uri_len(out, len(raw))
    out.extend(raw)


def _is_datetime(s):
    """YYYY-MM-DDThh:mm:ss with month, day, hour, minute and second in range (§4.3)."""
    if len(s) != 19 or s[4] + s[7] + s[10] + s[13] + s[16] != "--T::":
        return False
    for i in (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18):
        if not "0" <= s[i] <= "9":
            return False
    return (1 <= int(s[5:7]) <= 12 and 1 <= int(s[8:10]) <= 31 and int(s[11:13]) < 24
            and int(s[14:16]) < 60 and int(s[17:19]) < 60)


def _is_tag(t):
    return 0 < len(t) < 256 and all(c == "-" or c.isalpha() and c < "{" or "0" <= c <= "9"
                                    for c in t)


def _compact(lit):
    """(literal type, fixed payload or None) by the compact-form rule (§4.3)."""
    if lit.lang is not None:
        if not _is_tag(lit.lang):
            raise ValueError("bad language tag")
        return 5, None
    dt, v = lit.datatype, lit.value
    if dt == XSD_STRING:
        return 0, None
    if dt == XSD_INTEGER:
        if v[:1] != "-" and v.isdigit() or v[:1] == "-" and v[1:].isdigit():
            n = int(v)
            if str(n) == v and -0x80000000 <= n < 0x80000000:
                return 1, struct.pack("<i", n)
    elif dt == XSD_FLOAT or dt == XSD_DOUBLE:
        from .floats import bits, lexical

        wide = dt == XSD_DOUBLE
        b = bits(v, wide)
        if b is not None and lexical(b, wide) == v:
            return (7, struct.pack("<Q", b)) if wide else (2, struct.pack("<I", b))
    elif dt == XSD_DATETIME:
        if _is_datetime(v):
            return 3, v.encode()
    elif dt == XSD_BOOLEAN:
        if v == "true" or v == "false":
            return 4, b"\x01" if v == "true" else b"\x00"
    elif dt == RDF_LANGSTRING or not dt:
        raise ValueError("literal needs a datatype (langString: a tag)")
    return 6, None


def _literal(out, lit, prefixes, operand=False):
    code, raw = _compact(lit)
    if operand and code > 4:
        out.append(0x18)
    out.append(code)
    if raw is not None:
        out.extend(raw)
        return
    if code == 5:
        tag = lit.lang.encode()
        out.append(len(tag))
        out.extend(tag)
    elif code == 6:
        _uri(out, lit.datatype, prefixes)
    _text(out, lit.value)


def _mtype(t, vars_ok):
    if isinstance(t, str):
        if t.startswith(_W3):
            from .reserved import RESERVED

            return 2 if t in RESERVED else 1
        return 1
    if isinstance(t, int):
        if vars_ok and 0 <= t < 256:
            return 3
        raise ValueError("variable not allowed here")
    if isinstance(t, Lit):
        return 4
    if isinstance(t, BNode):
        return 5
    raise ValueError("not a KSP term: %r" % (t,))


def _member(out, t, code, prefixes):
    if code == 1:
        _uri(out, t, prefixes)
    elif code == 2:
        from .reserved import RESERVED

        out.append(RESERVED.index(t))
    elif code == 3:
        out.append(t)
    elif code == 4:
        _literal(out, t, prefixes)
    else:
        raw = t.label.encode()
        if not raw:
            raise ValueError("empty blank node label")
        _uri_len(out, len(raw))
        out.extend(raw)


def _graph(out, g, prefixes, vars_ok):
    if len(g) > 255:
        raise ValueError("more than 255 triples")
    out.append(len(g))
    prev = None
    for t in g:
        codes = [0, 0, 0]
        for i in range(3):
            if prev is None or prev[i] != t[i]:
                codes[i] = _mtype(t[i], vars_ok)
        if codes[0] == 4 or codes[1] > 3:
            raise ValueError("literal subject / literal or blank node predicate")
        out.append(codes[0] | codes[1] << 3 | codes[2] << 5)
        for i in range(3):
            if codes[i]:
                _member(out, t[i], codes[i], prefixes)
        prev = t


def _count(out, items, minimum=1):
    if not minimum <= len(items) < 256:
        raise ValueError("count out of range")
    out.append(len(items))


def request(tx, tid, con=True, graphs=(), vc=0, optional=(), prefixes=(), tcp=False,
            delete_graphs=(), insert_graphs=(), query_graphs=(), filters=(), modifier=(),
            max_size=None, credentials=(), echo=b"", epoch=0, out=None):
    """A REQ's bytes. `graphs`: the Graph fields in wire order (table 3.1: e.g. (delete,
    insert) for UPDATE DATA, (template, where) for INSERT, (where,) for SELECT/ASK); `vc`:
    SELECT's projection count; `optional`: the OGC graphs of a query; `modifier`: (order,
    order_var, limit, offset, distinct); `credentials`: (16-byte KP ID, password); `echo`: the
    value of an ECHO REQUIRED RES (1-10 bytes); `epoch`: the request number's epoch (§15,
    0 … 2^32 - 1; 0 is no option). An empty option value means the option is absent."""
    base = tx - 6 if 0x0A <= tx <= 0x0F else tx
    if not (1 <= base <= 8 or tx == TERMINATE or tx == RESET):
        raise ValueError("transaction type not in the firmware's scope")
    hs = 8 if tcp else 4
    if out is None:
        out = bytearray(hs)
    else:
        out[:] = bytes(hs)
    vars_ok = base > 3
    if tx == SELECT or tx == SELECT + 6:
        if not 0 <= vc < 256:
            raise ValueError("projection count 0..255")
        out.append(vc)
    for g in graphs:
        _graph(out, g, prefixes, vars_ok)
    if base == SELECT or base == ASK:
        _count(out, optional, 0)
        for g in optional:
            _graph(out, g, prefixes, True)
    if (tx == TERMINATE or tx == RESET) and prefixes:
        raise ValueError("no PREFIX without a Data field")
    opts = []
    if prefixes:
        opts.append(0)
    for code, value in ((1, delete_graphs), (2, insert_graphs), (3, query_graphs), (5, filters),
                        (6, modifier), (8, max_size), (9, credentials), (_ECHO, echo),
                        (_EPOCH, epoch)):
        if value or code == 8 and value is not None:
            opts.append(code)
    out.append(len(opts))
    for code in opts:
        out.append(code)
        if code == 0:
            _count(out, prefixes)
            for p in prefixes:
                if not p:
                    raise ValueError("empty prefix")
                _uri(out, p, ())
        elif code < 8:  # graph names, FILTER, SOLUTION MODIFIER: loaded when first used
            from .options import put

            put(out, code, (None, delete_graphs, insert_graphs, query_graphs, None, filters,
                            modifier)[code], prefixes)
        elif code == 8:
            out.extend(struct.pack("<I", max_size))
        elif code == _EPOCH:
            if tx == TERMINATE or not 0 < epoch <= 0xFFFFFFFF:
                raise ValueError("EPOCH 1..2^32-1, not on TERMINATE")
            out.extend(struct.pack("<I", epoch))
        elif code == _ECHO:
            if len(echo) > _ECHO_MAX:
                raise ValueError("ECHO value over 10 bytes")
            out.append(len(echo))
            out.extend(echo)
        else:
            kp_id, password = credentials
            pw = password.encode()
            if len(kp_id) != 16 or len(pw) > 255:
                raise ValueError("KP ID is 16 bytes, password at most 255")
            out.extend(kp_id)
            out.append(len(pw))
            out.extend(pw)
    struct.pack_into("<BBH", out, 0, VERSION, tx | (0x80 if con else 0), tid)
    if tcp:
        struct.pack_into("<I", out, 4, len(out))
    return out


def ack(tid, seq):
    """An ACK of IND `seq` (and every older one) of transaction `tid` (UDP only, R10); with
    `seq` None a bare ACK: of a transaction owed nothing, a keepalive (§2.4)."""
    if seq is None:
        return struct.pack("<BBH", VERSION, 0, tid)
    return struct.pack("<BBHH", VERSION, 0, tid, seq)


# ------------------------------------------------------------------------------------------
# Decoding


def peek_tid(buf):
    return buf[2] | buf[3] << 8 if len(buf) >= 4 else None


def decode(buf, answers, tcp=False):
    """Decode a RES/IND answering a request of transaction type `answers`. Raises KspError
    (with the status a SIB would answer) for invalid bytes."""
    n = len(buf)
    if n < (8 if tcp else 4):
        raise KspError(_BAD_DATA, "shorter than a header")
    tid = buf[2] | buf[3] << 8
    if tcp and struct.unpack_from("<I", buf, 4)[0] != n:
        raise KspError(_BAD_DATA, "TCP Length is not the message size")
    if buf[0] != VERSION:
        raise KspError(1, "version")
    ind = buf[1] >> 7
    status = buf[1] & 0x3F
    seq = epoch = None
    pos = 8 if tcp else 4
    if ind and not tcp:
        if n < 6:
            raise KspError(_BAD_DATA, "an IND header is 6 bytes")
        seq = buf[4] | buf[5] << 8
        pos = 6
    if buf[1] & _RES_EPOCH:  # only a UDP RES, not NUMBER BEHIND, names an epoch: u32 >= 1
        if ind or tcp or status == NUMBER_BEHIND or n < 8:
            raise KspError(_BAD_DATA, "type byte bit 6")
        epoch = struct.unpack_from("<I", buf, 4)[0]
        if not epoch:
            raise KspError(_BAD_DATA, "RES epoch 0")
        pos = 8
    if ind and (status == ECHO_REQUIRED or status == NUMBER_BEHIND):
        raise KspError(_BAD_DATA, "a RES-only status in an IND")
    base = answers - 6 if 0x0A <= answers <= 0x0F else answers
    if status == ECHO_REQUIRED and not ind:  # its Data field: u8 length (1-10) | the value
        if n < pos + 2 or buf[pos] > _ECHO_MAX or pos + 1 + buf[pos] != n:
            raise KspError(_BAD_DATA, "ECHO REQUIRED value")
        return Response(tid, status, ind, seq, bytes(buf[pos + 1:n]), epoch)
    if status == NUMBER_BEHIND and not ind:  # its Data field: u32 epoch | u32 next epoch
        if n != pos + 8:
            raise KspError(_BAD_DATA, "NUMBER BEHIND is 8 bytes of Data")
        return Response(tid, status, ind, seq, struct.unpack_from("<II", buf, pos))
    if status or not SELECT <= base <= _CONSTRUCT:
        if pos != n:
            raise KspError(_BAD_DATA, "a Data field where none belongs")
        return Response(tid, status, ind, seq, None, epoch)
    if base == _CONSTRUCT:
        raise NotImplementedError("CONSTRUCT results")
    try:
        if base == ASK:
            if buf[pos] > 1:
                raise ValueError("ASK byte")
            result = bool(buf[pos])
            pos += 1
        else:
            from .results import select_at  # loaded by the first SELECT result

            result, pos = select_at(buf, pos)
        if pos != n:
            raise ValueError("trailing bytes")
    except _FAILURES as e:
        raise KspError(_BAD_DATA, "bad data field: %s" % e)
    return Response(tid, status, ind, seq, result, epoch)
