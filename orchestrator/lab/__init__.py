"""A real multi-node Ray cluster on one machine (network namespaces, shaped links)."""
