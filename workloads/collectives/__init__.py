"""One small module per collective; importing one registers it (workloads.registry)."""
