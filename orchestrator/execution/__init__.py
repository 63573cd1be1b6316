"""Running a plan on Ray: connection, the actor pool, the runner, provenance, the console."""
