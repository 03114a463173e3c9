"""oomdoctor: why an LLM inference server ran out of GPU memory, and which flag to change."""

__version__ = "0.1.0"

# The packages in layer order, lowest first: a module imports only from its own layer and the layers
# before it (tests/test_architecture.py checks the real import graph against this). ``api`` is the
# library's entry point over the pipeline; ``capture`` runs inside the server process and imports none
# of them.
LAYERS = ("base", "input", "memory", "live", "evidence", "inference", "advice", "pipeline", "api", "report", "commands")
