"""What a run measures, before Ray: the validated spec, sizes, inventory, the pure planner, the memory check."""
