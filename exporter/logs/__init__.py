"""Reading vLLM logs: line formats, vLLM's line shape, patterns, and the stage machine."""
