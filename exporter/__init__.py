"""vLLM Headroom: memory and KV-cache headroom monitoring for vLLM servers."""

__version__ = "0.1.0"
