"""Benchmarks for the KSP codec, transports and SIB."""
