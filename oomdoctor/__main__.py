"""Allows ``python -m oomdoctor``."""

from oomdoctor.commands.cli import main

main()
