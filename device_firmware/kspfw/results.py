"""Reading SELECT results (§6.1), loaded by `codec.decode` when the first one arrives: a board
that only sends readings never needs it, and its heap stays smaller."""
import struct

from .codec import (RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER,
                    BNode, Lit, _is_datetime, _is_tag)


class Select:
    """A SELECT result: `rows[i][k]` is the binding of variable k (None: unbound)."""

    def __init__(self, prefixes, total, variables, rows):
        self.prefixes = prefixes
        self.total = total
        self.variables = variables
        self.rows = rows


def _ulen(buf, pos):
    n = buf[pos]
    if n < 0x80:
        return n, pos + 1
    n = n & 0x7F | buf[pos + 1] << 7
    if n < 0x80:
        raise ValueError("URI length not minimal")
    return n, pos + 2


def _str(buf, pos, n):
    end = pos + n
    if end > len(buf):
        raise IndexError
    return str(buf[pos:end], "utf-8"), end


def _slen(buf, pos):
    b = buf[pos]
    w = b >> 6
    n = b & 0x3F
    for i in range(w):
        n |= buf[pos + 1 + i] << (6 + 8 * i)
    if w and n < 1 << (6 + 8 * (w - 1)):
        raise ValueError("string length not minimal")
    return _str(buf, pos + 1 + w, n)


def _uri_at(buf, pos, prefixes):
    i = buf[pos]
    n, pos = _ulen(buf, pos + 1)
    s, pos = _str(buf, pos, n)
    if i:
        s = prefixes[i - 1] + s  # IndexError: beyond the list
    return s, pos


def _literal_at(buf, pos, prefixes):
    k = buf[pos]
    pos += 1
    size = (0, 4, 4, 19, 1, 0, 0, 8)[k] if k < 8 else -1
    if size < 0:
        raise ValueError("literal type")
    if size:
        end = pos + size
        if end > len(buf):
            raise IndexError
        raw = buf[pos:end]
        if k == 2 or k == 7:
            from .floats import lexical

            wide = k == 7
            return Lit(lexical(struct.unpack("<Q" if wide else "<I", raw)[0], wide),
                       XSD_DOUBLE if wide else XSD_FLOAT), end
        if k == 1:
            return Lit(str(struct.unpack("<i", raw)[0]), XSD_INTEGER), end
        if k == 3:
            s = str(raw, "utf-8")
            if not _is_datetime(s):
                raise ValueError("dateTime")
            return Lit(s, XSD_DATETIME), end
        if raw[0] > 1:
            raise ValueError("boolean")
        return Lit("true" if raw[0] else "false", XSD_BOOLEAN), end
    if k == 0:
        s, pos = _slen(buf, pos)
        return Lit(s), pos
    if k == 5:
        tag, pos = _str(buf, pos + 1, buf[pos])
        if not _is_tag(tag):
            raise ValueError("language tag")
        s, pos = _slen(buf, pos)
        return Lit(s, RDF_LANGSTRING, tag), pos
    dt, pos = _uri_at(buf, pos, prefixes)
    if not dt or dt == RDF_LANGSTRING:
        raise ValueError("datatype")
    s, pos = _slen(buf, pos)
    return Lit(s, dt), pos


def _term_at(buf, pos, prefixes):
    """One result term (type byte + payload); None for unbound."""
    k = buf[pos]
    pos += 1
    if k == 0:
        return None, pos
    if k == 1:
        return _uri_at(buf, pos, prefixes)
    if k == 2:
        from .reserved import RESERVED

        return RESERVED[buf[pos]], pos + 1  # IndexError: no such reserved word
    if k == 4:
        return _literal_at(buf, pos, prefixes)
    if k == 5:
        n, pos = _ulen(buf, pos)
        if not n:
            raise ValueError("empty blank node label")
        s, pos = _str(buf, pos, n)
        return BNode(s), pos
    raise ValueError("result term type")


def select_at(buf, pos):
    """The SELECT result at `pos`: (Select, position after it); IndexError/ValueError when
    the bytes are bad."""
    prefixes = []
    count = buf[pos]
    pos += 1
    for _ in range(count):
        if buf[pos]:
            raise ValueError("prefix entry with an index")
        k, pos = _ulen(buf, pos + 1)
        if not k:
            raise ValueError("empty prefix entry")
        p, pos = _str(buf, pos, k)
        prefixes.append(p)
    total, count, vc = struct.unpack_from("<HHB", buf, pos)
    pos += 5
    if count > total:
        raise ValueError("RC > TRC")
    rows = []
    for _ in range(count):
        row = []
        for _ in range(vc):
            t, pos = _term_at(buf, pos, prefixes)
            row.append(t)
        rows.append(row)
    return Select(prefixes, total, vc, rows), pos
