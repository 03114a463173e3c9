"""Typed evidence from lines and files: the engines' parsers, evidence-file readers, phase tables, runs and readings."""
