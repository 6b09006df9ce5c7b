"""Compute-optimal sizing: the model and tokens a budget buys, or the tokens a model should see."""
