"""Semantic Information Broker (SIB): the KSP server holding the RDF knowledge base.

`Sib` is the `Service` the transports feed; `SibCore` executes requests; `QuadStore` is the
pyoxigraph store with an exact-delta write path.

The other names are what a server in front of another store (`bridge`) shares with the SIB so
that a device cannot tell the two apart: request checks (`check_request`), results in the SIB's
order (`results_of`), patterns, the access policy and its authenticator, the journal of
persistent operations, metrics. The persistent-operation engine is `sib.engine`.
"""
from .access import AccessPolicy, hash_password
from .auth import Authenticator
from .core import SibCore
from .errors import RequestError
from .journal import FILE as JOURNAL_FILE, Journal, TrackedChannel
from .metrics import Histogram, Metrics
from .oxterms import canonical
from .pattern import Pattern
from .query import results_of
from .service import Sib
from .store import Delta, QuadStore
from .validate import check_request

__all__ = ["Sib", "SibCore", "QuadStore", "Delta", "RequestError", "AccessPolicy",
           "hash_password", "Authenticator", "Journal", "JOURNAL_FILE", "TrackedChannel",
           "Metrics", "Histogram", "Pattern", "results_of", "check_request", "canonical"]
