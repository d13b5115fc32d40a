"""Scraping vLLM servers: fetching /metrics and normalizing names across vLLM versions."""
