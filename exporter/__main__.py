"""Allows `python -m exporter ...` as an alias of the `vllm-headroom` command."""

from exporter.cli import main

raise SystemExit(main())
