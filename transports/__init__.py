"""KSP transports: thin asyncio adapters (TCP, UDP, CoAP) around the sans-I/O core in ksp."""
