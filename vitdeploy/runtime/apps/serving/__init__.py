"""Serving prompts over HTTP: the service (one encoder and decoder, the embedding cache, admission), the server
in one process, and the same API on Ray Serve."""
