"""Fine-tuning: task heads, data readers, metrics and task objectives."""
