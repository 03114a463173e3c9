"""From evidence to findings: facts, the fact catalogue, completeness, rules, confidence and the node step."""
