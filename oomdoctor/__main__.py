"""Allows ``python -m oomdoctor``."""

from oomdoctor.entry import main

main()
