"""Semantic Information Broker (SIB): the KSP server holding the RDF knowledge base.

`Sib` is the `Service` the transports feed; `SibCore` executes requests; `QuadStore` is the
pyoxigraph store with an exact-delta write path.
"""
from .access import AccessPolicy, hash_password
from .core import SibCore
from .errors import RequestError
from .service import Sib
from .store import Delta, QuadStore

__all__ = ["Sib", "SibCore", "QuadStore", "Delta", "RequestError", "AccessPolicy",
           "hash_password"]
