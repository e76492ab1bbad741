"""What a run reports: event logs, the console, goodput, live metrics, W&B."""
