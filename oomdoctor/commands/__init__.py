"""The commands: one module each, click options, the entry point and exit codes."""
