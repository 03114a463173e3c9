"""What a diagnosis becomes for people and programs: the JSON contract, the view, redaction, bundles and renderers."""
