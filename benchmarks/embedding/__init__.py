"""edge-sql embedded in another program (the Python API under an async server)."""
