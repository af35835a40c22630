"""Machine-tuned CPU routes, apart from the model core.

A linear layer that picks, per shape, the faster of two products on this machine (timed once), and
weight-only int8 inference.
"""
