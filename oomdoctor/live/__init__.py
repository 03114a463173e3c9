"""The only code that touches a live GPU or host: NVML, /proc and nvidia-smi."""
