"""A private Ray head for the tests: its own temp dir and ports, stopped by process session."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from orchestrator.lab import raynodes


class RayHead:
    def __init__(self, num_cpus: int = 2, ip: str = "127.0.0.1", dashboard: bool = False,
                 env: dict[str, str] | None = None) -> None:
        # Short path: Ray's unix socket names must stay under ~107 characters.
        self.temp_dir = tempfile.mkdtemp(prefix="cbt", dir="/tmp")
        self.port = raynodes.free_port()
        self.ip = ip
        self.address = f"{ip}:{self.port}"
        self.log = os.path.join(self.temp_dir, "head.log")
        self.auth_env = raynodes.auth_env(os.path.join(self.temp_dir, "auth_token"))
        ports = raynodes.private_port_args(head=True)
        # the node's metrics agent serves Prometheus text here (application metrics included)
        self.metrics_port = int(next(p.split("=")[1] for p in ports if p.startswith("--metrics-export-port=")))
        self.dashboard_url = None
        if dashboard:
            dash_port = next(p.split("=")[1] for p in ports if p.startswith("--dashboard-port="))
            self.dashboard_url = f"http://127.0.0.1:{dash_port}"
        self.sid = raynodes.ray_start(
            ["--head", f"--port={self.port}", f"--node-ip-address={ip}", f"--temp-dir={self.temp_dir}",
             f"--num-cpus={num_cpus}", f"--include-dashboard={'true' if dashboard else 'false'}",
             "--dashboard-host=127.0.0.1", *ports],
            self.log,
            env={**self.auth_env, **(env or {})},
        )
        if not raynodes.wait_port(ip, self.port, 60):
            self.stop()
            raise RuntimeError(f"Ray head did not open {self.address}; see {self.log}")
        time.sleep(2)  # the raylet registers right after the GCS opens its port
        if dashboard:
            dash = self.dashboard_url.rsplit(":", 1)
            if not raynodes.wait_port("127.0.0.1", int(dash[1]), 60):
                self.stop()
                raise RuntimeError(f"Ray dashboard did not open {self.dashboard_url}; see {self.log}")

    def env(self) -> dict[str, str]:
        """Environment for a client process of this cluster."""
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        return {**env, **self.auth_env, "RAY_ADDRESS": self.address}

    def stop(self) -> None:
        raynodes.stop_sessions([self.sid], grace_s=2.0)  # a test's head holds nothing to save
        shutil.rmtree(self.temp_dir, ignore_errors=True)
