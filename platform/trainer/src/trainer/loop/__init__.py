"""One replica group's run: the Trainer, its step loop and the loop's accounts."""
