"""Parsers: pure, incremental line -> event parsers, one module per system."""
