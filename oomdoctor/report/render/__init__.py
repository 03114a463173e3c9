"""Renderers: thin views of one Diagnosis (text for terminals, JSON for scripts)."""
