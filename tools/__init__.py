"""Command-line tools for ksp-gateway (entry point: the ``ksp`` command)."""
