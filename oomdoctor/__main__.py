"""Allows ``python -m oomdoctor``."""

from oomdoctor.commands.entry import main

main()
