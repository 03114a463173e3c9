"""The shipped rule catalogue: one TOML file per rule (installed as ``oomdoctor.rules``)."""
