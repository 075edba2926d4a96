"""Write docs/api.md, the API reference, from the public names (`__all__`) and docstrings of the
modules a user imports: `python -m tools.apidoc` (`--check`: exit 1 if docs/api.md is stale,
as the test suite does)."""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "docs" / "api.md"

#: (module, what it is for); each documents the names in its `__all__`.
MODULES = (
    ("transports", "the Python KP client and the servers"),
    ("ksp", "the protocol core: codec, message model, terms, sessions (sans-I/O)"),
    ("sib", "the SIB, to embed in a program"),
    ("sib.engine", "the persistent-operation engine the SIB and the bridge share (sans-I/O)"),
)


def _signature(obj) -> str:
    """The signature as source shows it: annotations unquoted, no `-> None`."""
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    text = re.sub(r"""ForwardRef\(["']+([^"']*)["']+\)""", r"\1", text)
    text = re.sub(r"""(: |-> )"?'([^']*)'"?""", r"\1\2", text)
    return text.replace(" -> None", "")


def _doc(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    # A NamedTuple or dataclass without a docstring of its own shows its generated one.
    return "" if doc.startswith((f"{getattr(obj, '__name__', '')}(",)) else doc


def _members(cls) -> list[tuple[str, object]]:
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in ("__aenter__", "__aiter__"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            out.append((name, member))
    return out


def render() -> str:
    lines = ["# API reference", "",
             "Generated from the docstrings by `python -m tools.apidoc`; do not edit by hand "
             "(a test checks that it is current).", "",
             "**Two term models, side by side.** The KP client (`transports`) takes and returns "
             "rdflib terms (`rdflib.URIRef`, `Literal`, `BNode`, `Variable`), as the rest of a "
             "Python RDF program does. The protocol core (`ksp`) and the SIB use `ksp.terms` "
             "(`IRI`, `Literal`, `BNode`, `Var`): small immutable values that carry every "
             "lexical form exactly and that the codec reads and writes without a conversion. "
             "The client converts at its edge (`transports/rdfterms.py`); a `ksp.Request` "
             "given to the client may hold either kind.", ""]
    for modname, purpose in MODULES:
        module = importlib.import_module(modname)
        lines += [f"## `{modname}` — {purpose}", ""]
        for name in sorted(getattr(module, "__all__", ()), key=str.lower):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                kind = "exception" if issubclass(obj, BaseException) else "class"
                lines += [f"### {kind} `{modname}.{name}{_signature(obj)}`", ""]
                if doc := _doc(obj):
                    lines += [doc, ""]
                for mname, member in _members(obj):
                    if isinstance(member, property):
                        lines.append(f"- `{mname}` (property)"
                                     + (f": {_doc(member).splitlines()[0]}" if _doc(member)
                                        else ""))
                    else:
                        first = _doc(member).split("\n\n")[0].replace("\n", " ")
                        lines.append(f"- `{mname}{_signature(member)}`"
                                     + (f": {first}" if first else ""))
                lines.append("")
            elif callable(obj):
                lines += [f"### `{modname}.{name}{_signature(obj)}`", ""]
                if doc := _doc(obj):
                    lines += [doc, ""]
            else:
                lines += [f"### `{modname}.{name}`", "", f"`{obj!r}`"[:200], ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.apidoc", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python -m tools.apidoc", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
