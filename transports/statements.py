"""SPARQL text compiled once on the client: prepared statements (`KP.prepare`) and each KP's
bounded compile cache, through which every SPARQL text the KP is given goes.

A compile (`ksp.sparql.compile_named`) is a pure function of the text and of three settings:
the persistent form or not, the prefix names, `every_graph`. So one is reused only where all
four are equal: the cache's key is (text, persistent, every_graph), and an entry keeps a copy
of the prefix names it was compiled with and is used only while the KP's are equal to them (a
KP whose `prefixes` changed, in place or replaced, compiles again). Credentials are no part of
a compile: the session adds the KP's to each request as it sends it. Errors are not cached.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from ksp import Request, Tx

__all__ = ["Statement", "CompileCache"]

MAX_ENTRIES = 256
"""Compiles a KP keeps by default (the least recently used goes first)."""
MAX_TEXT = 16 * 1024
"""Characters of the longest text a cache keeps by default (longer ones are compiled each
time): a cache holds at most `MAX_ENTRIES` × `MAX_TEXT` characters of text."""


class Statement(NamedTuple):
    """SPARQL text compiled into a KSP request (`KP.prepare`). Give it to `KP.query`,
    `query_all`, `update`, `subscribe` or `request` in place of the text, as often as wanted:
    it is not compiled again, and results name their variables as the text does (`names[k]` is
    the SPARQL name of variable k). It holds no TID and no credentials (each request gets the
    KP's), so any KP may send it; its prefix names and `every_graph` are those of the KP that
    prepared it, at the time."""

    text: str
    request: Request
    names: tuple[str, ...]

    @property
    def tx(self) -> Tx:
        """What the statement does (`Tx.SELECT`, `Tx.INSERT_DATA`, ...)."""
        return self.request.tx


class CompileCache:
    """The compiles of the last `max_entries` texts (least recently used out), each text of
    at most `max_text` characters (longer ones are compiled every time). `hits` and `misses`
    count the look-ups. `max_entries` 0: nothing is kept."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_text: int = MAX_TEXT) -> None:
        if max_entries < 0 or max_text < 0:
            raise ValueError(f"max_entries and max_text must be ≥ 0, not {max_entries}, "
                             f"{max_text}")
        self.max_entries = max_entries
        self.max_text = max_text
        self.hits = 0
        self.misses = 0
        # (text, persistent, every_graph) → (the prefix names compiled with, the Statement)
        self._entries: OrderedDict[tuple, tuple[dict | None, Statement]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def compile(self, text: str, *, persistent: bool = False,
                prefixes: dict[str, str] | None = None, every_graph: bool = False
                ) -> Statement:
        """`text` compiled (`ksp.sparql.compile_named`), from the cache when it was compiled
        with the same settings; raises what `compile_named` raises."""
        key = (text, bool(persistent), bool(every_graph))
        entries = self._entries
        try:
            kept = entries.get(key)
        except TypeError:  # not a str (unhashable): compile_named says what it wants
            kept = None
        if kept is not None and kept[0] == prefixes:
            entries.move_to_end(key)
            self.hits += 1
            return kept[1]
        self.misses += 1
        from ksp.sparql import compile_named  # on first use: importing it takes ~90 ms

        request, names = compile_named(text, persistent=bool(persistent), prefixes=prefixes,
                                       every_graph=bool(every_graph))
        statement = Statement(text, request, names)
        if self.max_entries and len(text) <= self.max_text:
            entries[key] = (None if prefixes is None else dict(prefixes), statement)
            entries.move_to_end(key)
            while len(entries) > self.max_entries:
                entries.popitem(last=False)
        return statement
