"""The lowest layer: units, errors, outcomes, evidence types, timestamps and input limits; imports no other layer."""
