"""Latency-bandwidth fits `time = alpha + bytes / bandwidth`, and the one rule that says
whether a fit is good enough to show (report) or to predict from (predict). Pure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Fit:
    """time_us = alpha_us + msg_bytes / (bandwidth_gbps * 1e3), with how well it fits."""

    alpha_us: float
    bandwidth_gbps: float  # algorithm bandwidth: bytes moved per second / 1e9
    r2: float
    max_rel_err: float
    points: int

    @property
    def reason(self) -> str | None:
        """Why the fit is not accepted, or None. The acceptance rule: at least 3 sizes,
        non-negative latency, positive bandwidth, R^2 >= 0.9 and no point off by more than 50%."""
        if self.points < 3:
            return f"only {self.points} size(s)"
        if not self.bandwidth_gbps > 0:
            return "time does not grow with size"
        if self.alpha_us < 0:
            return f"negative latency ({self.alpha_us:.3g} us)"
        if self.r2 < 0.9:
            return f"R^2 {self.r2:.2f} < 0.9"
        if self.max_rel_err > 0.5:
            return f"a point off by {self.max_rel_err:.0%} > 50%"
        return None

    @property
    def poor(self) -> bool:
        return self.reason is not None


def fit_alpha_beta(msg_bytes: np.ndarray, time_us: np.ndarray) -> Fit:
    """Least squares of time = alpha + bytes / bandwidth, weighted by 1/time so that small
    (latency-bound) and large (bandwidth-bound) sizes count alike."""
    x = np.asarray(msg_bytes, dtype=float)
    y = np.asarray(time_us, dtype=float)
    w = 1.0 / y
    a = np.column_stack([np.ones_like(x), x]) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, y * w, rcond=None)
    pred = alpha + beta * x
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
    bandwidth = 1.0 / (beta * 1e3) if beta > 0 else float("nan")
    return Fit(float(alpha), bandwidth, 1.0 - ss_res / ss_tot, float(np.max(np.abs(pred - y) / y)), len(x))


def fit_groups(df: pd.DataFrame):
    """(collective, topology, world_size, median time per msg_bytes, fit) for every shape measured."""
    d = df[df.status == "ok"]
    for (coll, topo, n), g in d.groupby(["collective", "topology", "world_size"]):
        per_size = g.groupby("msg_bytes").time_us.median()
        yield coll, topo, int(n), per_size, fit_alpha_beta(per_size.index.values, per_size.values)


def fits(df: pd.DataFrame) -> list[dict]:
    """Every shape's fit; alpha and bandwidth only where the fit is accepted, else the reason."""
    return [
        {"collective": coll, "topology": topo, "world_size": int(n), "sizes": fit.points,
         "alpha_us": None if fit.poor else fit.alpha_us, "bandwidth": None if fit.poor else fit.bandwidth_gbps,
         "r2": fit.r2, "max_rel_err": fit.max_rel_err, "quality": "good" if not fit.poor else f"poor: {fit.reason}"}
        for coll, topo, n, _, fit in fit_groups(df)
    ]
