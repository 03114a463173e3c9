"""Recommendations: which flag to change, in which direction, to what value, checked against the budget."""
