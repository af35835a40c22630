"""Training: the loop, optimizers and schedules, data parallelism, recipes."""
