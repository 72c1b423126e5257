"""Randomness for stochastic fields: the counter-based generator every backend must match."""
