"""A stand-in for vLLM that speaks its real formats, for tests and the demo."""
