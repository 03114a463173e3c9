"""Packages for setuptools; everything else is in setup.cfg.

Every package under oomdoctor/ is found, so a new one is in the wheel (tests/test_packaging.py), and
the rule catalogue rules/ is installed as oomdoctor.rules (setup.cfg package_dir).
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["oomdoctor", "oomdoctor.*"]), "oomdoctor.rules"])
