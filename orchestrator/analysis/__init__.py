"""What a user reads out of results: diagnosis, fits, predictions, plots. Pure; no Ray."""
