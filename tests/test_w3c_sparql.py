"""The W3C SPARQL syntax tests (SPARQL 1.0 `dawg-data-r2`, SPARQL 1.1 `sparql11`) against
`ksp.sparql.compile`: valid text compiles or is `UnsupportedSparql` naming the feature, never a
syntax error; invalid text is a `SparqlSyntaxError` (where the subset parser stops at a feature
it lacks, a complete parser, pyoxigraph's, tells whether the text is SPARQL at all).

The suites come from rdflib's source distribution, unpacked into tests/w3c/ by the project's
bootstrap (`scripts/_env.sh`, `install_w3c_suites`), read here from their manifests: every
approved (not withdrawn) positive and negative syntax test of query and update.
"""
from __future__ import annotations

import pathlib

import pytest
import rdflib
from rdflib.namespace import RDF

from ksp.errors import SparqlSyntaxError, UnsupportedSparql
from ksp.sparql import compile

SUITES = pathlib.Path(__file__).resolve().parent / "w3c"
MF = rdflib.Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#")
QT = rdflib.Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-query#")
UT = rdflib.Namespace("http://www.w3.org/2009/sparql/tests/test-update#")
DAWGT = rdflib.Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-dawg#")
POSITIVE = {MF.PositiveSyntaxTest, MF.PositiveSyntaxTest11, MF.PositiveUpdateSyntaxTest11}
NEGATIVE = {MF.NegativeSyntaxTest, MF.NegativeSyntaxTest11, MF.NegativeUpdateSyntaxTest11}

#: Tests the suites contradict each other on, with the side we take.
CONTRADICTED = {
    # "PrefixName with backslash-escaped colons" (`og:audio\:title`), approved 2012-01-31;
    # syn-bad-pname-06 (`:c\:z`), approved 2012-08-07, says the opposite, as the SPARQL 1.1
    # grammar's PN_LOCAL_ESC does (no ':' in its list). We follow the later test and the REC.
    "sparql11/syntax-query/qname-escape-01.rq",
    # `:x :p 123. .`: in SPARQL 1.0 `123.` was a DECIMAL, so one '.' ends the triple; SPARQL
    # 1.1's DECIMAL needs a digit after the point ([0-9]* '.' [0-9]+), so `123` '.' '.' is a
    # stray dot. We parse SPARQL 1.1.
    "dawg-data-r2/syntax-sparql1/syntax-lit-08.rq",
}


def _cases() -> list[tuple[str, bool]]:
    """(path relative to the suites, valid?) of every approved syntax test."""
    if not (SUITES / "sparql11").is_dir():
        return []
    cases = []
    for manifest in sorted(SUITES.rglob("manifest.ttl")):
        g = rdflib.Graph().parse(manifest, format="turtle")
        for test in set(g.subjects(RDF.type, None)):
            kinds = set(g.objects(test, RDF.type))
            if not kinds & (POSITIVE | NEGATIVE):
                continue
            if DAWGT.Withdrawn in set(g.objects(test, DAWGT.approval)):
                continue
            action = g.value(test, MF.action)
            action = g.value(action, QT.query) or g.value(action, UT.request) or action
            path = pathlib.Path(rdflib.URIRef(action).removeprefix("file://"))
            cases.append((path.relative_to(SUITES).as_posix(), bool(kinds & POSITIVE)))
    return sorted(cases)


CASES = _cases()


def test_the_suites_are_installed():
    """`scripts/test` unpacks them; without them every case below would silently vanish."""
    assert len(CASES) > 300, "tests/w3c/ is missing: run scripts/test (install_w3c_suites)"
    assert sum(valid for _, valid in CASES) > 200


@pytest.mark.parametrize("path,valid", CASES, ids=[p for p, _ in CASES])
def test_w3c_syntax(path, valid):
    text = (SUITES / path).read_text(encoding="utf-8")
    if path in CONTRADICTED:
        valid = not valid
    if valid:
        try:
            compile(text)
        except UnsupportedSparql as exc:
            assert exc.feature and exc.feature in str(exc)
        except SparqlSyntaxError as exc:
            pytest.fail(f"valid SPARQL refused as a syntax error: {exc}")
    else:  # a syntax error, even where the subset parser stops first at a feature it lacks
        with pytest.raises(SparqlSyntaxError):
            compile(text)
