"""xsd:float / xsd:double lexical forms, exact, in integer arithmetic (wire-format §4.3).

MicroPython formats floats differently from CPython and boards have single-precision floats,
so the spec's "writing a float" rule (shortest decimal that reads back as the same binary value,
laid out as CPython's repr) is computed here from the IEEE bit pattern with Python's big ints.
`lexical(bits, wide)` writes a decoded value; `bits(lexical, wide)` gives the bit pattern a
lexical form rounds to, or None when it has no compact form (the caller then compares
`lexical(bits(x)) == x`, the compact-form rule).
"""
import struct


def float32(x):
    """The lexical form of number `x` as an xsd:float (rounded to binary32, as it travels)."""
    return lexical(struct.unpack("<I", struct.pack("<f", x))[0], False)


def _fmt(wide):
    # (precision p, exponent bits, unit exponent of the subnormals)
    return (53, 11, -1074) if wide else (24, 8, -149)


def _bitlen(x):
    """x.bit_length() for x > 0 (MicroPython's int has no bit_length)."""
    return len(bin(x)) - 2


def _pow10ge(x, s2, s):
    """Whether x * 2**s2 >= 10**s."""
    left = x << s2 if s2 > 0 else x
    right = 1 << -s2 if s2 < 0 else 1
    if s < 0:
        left *= 10 ** -s
    else:
        right *= 10 ** s
    return left >= right


def lexical(b, wide):
    """The lexical form of the binary32 (wide: binary64) value with bit pattern `b`."""
    p, eb, emin = _fmt(wide)
    fb = p - 1
    be = (b >> fb) & ((1 << eb) - 1)
    frac = b & ((1 << fb) - 1)
    neg = "-" if b >> (fb + eb) else ""
    if be == (1 << eb) - 1:
        return "NaN" if frac else neg + "INF"
    if not (be or frac):
        return neg + "0.0"
    m, e = (frac | 1 << fb, be + emin - 1) if be else (frac, emin)
    # Round-trip interval in units of 2**(e-2): (lo, hi) around v, ends included for even m.
    v, s2 = m << 2, e - 2
    lo, hi = v - (1 if be > 1 and not frac else 2), v + 2
    x = ((_bitlen(m) + e - 1) * 30103) // 100000
    while not _pow10ge(v, s2, x):
        x -= 1
    while _pow10ge(v, s2, x + 1):
        x += 1
    even = not m & 1
    for n in range(1, 18):
        s = x - n + 1
        cf = (10 ** s if s > 0 else 1) << (-s2 if s2 < 0 else 0)
        rf = (10 ** -s if s < 0 else 1) << (s2 if s2 > 0 else 0)
        vr, lr, hr = v * rf, lo * rf, hi * rf
        best = None
        d = vr // cf
        for c in (d, d + 1):
            cv = c * cf
            if lr < cv < hr or even and (cv == lr or cv == hr):
                if best is None or abs(cv - vr) < abs(best * cf - vr) or (
                        abs(cv - vr) == abs(best * cf - vr) and not c & 1):
                    best = c
        if best is not None:
            digits = str(best)
            x = s + len(digits) - 1
            return neg + _layout(digits.rstrip("0") or "0", x)
    raise ValueError("no shortest form")  # unreachable: 17 digits always round-trip


def _layout(d, x):
    """Digits d (value d[0].d[1:] * 10**x) written as CPython's repr writes a float."""
    if -4 <= x < 16:
        if x < 0:
            return "0." + "0" * (-x - 1) + d
        d = d + "0" * (x + 1 - len(d)) if len(d) <= x + 1 else d
        return d[:x + 1] + "." + (d[x + 1:] or "0")
    return d[0] + ("." + d[1:] if len(d) > 1 else "") + "e" + ("-" if x < 0 else "+") + (
        "0" if -10 < x < 10 else "") + str(abs(x))


def bits(lex, wide):
    """The bit pattern `lex` rounds to (round half to even), or None if it is no plain decimal
    number within range. 'NaN', 'INF', '-INF' give the canonical patterns."""
    p, eb, emin = _fmt(wide)
    fb = p - 1
    top = (1 << eb) - 1
    sign = 1 << (fb + eb)
    if lex == "NaN":
        return top << fb | 1 << (fb - 1)
    neg = lex[:1] == "-"
    body = lex[1:] if neg else lex
    if body == "INF":
        return (sign if neg else 0) | top << fb
    if not 0 < len(body) < 40:
        return None
    mant, _, ex = body.partition("e")
    ip, _, fp = mant.partition(".")
    if not (ip.isdigit() and (fp.isdigit() or not fp)) or ex and not (
            ex[:1] in "+-" and ex[1:].isdigit() and len(ex) < 6):
        return None
    dig = int(ip + fp)
    q = (int(ex) if ex else 0) - len(fp)
    out = sign if neg else 0
    if not dig:
        return out
    num, den = (dig * 10 ** q, 1) if q >= 0 else (dig, 10 ** -q)
    e = _bitlen(num) - _bitlen(den) - p
    if (num << -e if e < 0 else num) // (den << e if e > 0 else den) >> p:
        e += 1
    e = max(e, emin)
    m, r = divmod(num << -e if e < 0 else num, den << e if e > 0 else den)
    r2 = r << 1
    d2 = den << e if e > 0 else den
    if r2 > d2 or r2 == d2 and m & 1:
        m += 1
    if m >> p:
        m >>= 1
        e += 1
    be = e - emin + 1 if m >> fb else 0
    if be >= top:
        return None
    return out | be << fb | (m & ((1 << fb) - 1))
