"""Semantic Information Broker (SIB): the KSP server holding the RDF knowledge base."""
