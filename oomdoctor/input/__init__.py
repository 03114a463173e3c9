"""Reading what the user gave: files and streams, the scanner, line prefixes, patterns, paste repair and bug-report bodies."""
