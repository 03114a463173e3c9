"""Memory arithmetic: every budget formula, with units in the names, and the table of GPUs."""
