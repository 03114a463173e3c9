"""One diagnosis end to end: inputs read once, incidents found, evaluated and worded."""
