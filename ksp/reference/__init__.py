"""The reference side of the wire format: what checks and explains the hot codec, never on its path.

- `schema.py`: every layout of docs/wire-format.md in construct, a second, declarative reading
  of the spec (a differential oracle for `ksp.codec` and the source of `explain`).
- `explain.py`: a message's annotated field table (offset, length, field, meaning).
- `jsonmodel.py`: messages ⇄ plain JSON (the golden vectors, tools, non-Python peers).

Needs construct and bitstring (base dependencies); `ksp.codec` never imports this package.
"""
