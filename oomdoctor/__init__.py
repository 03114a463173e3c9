"""oomdoctor: why an LLM inference server ran out of GPU memory, and which flag to change."""

__version__ = "0.1.0"
