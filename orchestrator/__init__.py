"""Driver side of collbench: CLI, Ray connection, planning, actors, results. Never touches a device."""

__version__ = "0.1.0"
