#!/usr/bin/python3
"""Fits the coefficients of runtime::cpu::ErfRational (VectorMath.h).

erf(x) ~ x P(x^2) / Q(x^2) on (0, 3.92], Q(0) = 1, P of degree 6 and Q of
degree 5 in x^2: iteratively reweighted least squares on the linearized
relative error x P - erf Q (Lawson's weights, which push the fit towards
the smallest largest relative error), then each coefficient rounded to
float in turn, highest degrees first, with the others refitted around it.
Prints the largest relative error of the rounded coefficients in double
(about 5.6e-8; evaluated in float, ErfRational is within 7 ulp, which
CpuVectorMath.ErfRationalIsWithinSevenUlpOfErf checks) and the arrays.

  scripts/fit_erf_rational.py
"""
from math import erf

import numpy as np

SATURATION = 3.92  # erf(3.92) rounds to 1 in float
P_DEGREE, Q_DEGREE = 6, 5

xs = np.linspace(1e-4, SATURATION, 20000)
f = np.array([erf(v) for v in xs])
t = xs * xs
ncoef = P_DEGREE + 1 + Q_DEGREE
# Columns: x t^k for P's k = 0..6, then -erf t^k for Q's k = 1..5.
A = np.stack([xs * t ** k for k in range(P_DEGREE + 1)] +
             [-(f * t ** k) for k in range(1, Q_DEGREE + 1)], 1)


def split(c):
    return c[:P_DEGREE + 1], np.concatenate([[1.0], c[P_DEGREE + 1:]])


def fit(fixed):
    """The coefficients (those in `fixed` held at their values) and the
    largest relative error."""
    w = np.ones_like(xs)
    q_values = np.ones_like(xs)
    free = [i for i in range(ncoef) if i not in fixed]
    for _ in range(60):
        b = f - sum(A[:, i] * v for i, v in fixed.items())
        s = w / np.abs(f * q_values)
        c, *_ = np.linalg.lstsq(A[:, free] * s[:, None], b * s, rcond=None)
        full = np.zeros(ncoef)
        full[free] = c
        for i, v in fixed.items():
            full[i] = v
        p, q = split(full)
        q_values = np.polyval(q[::-1], t)
        err = np.abs(xs * np.polyval(p[::-1], t) / q_values - f) / f
        w = w * (err / err.max()) ** 0.3 + 1e-3 * w
        w /= w.max()
    return full, err.max()


def main():
    fixed = {}
    # Highest degrees of P and Q first, alternately.
    for i in [6, 11, 5, 10, 4, 9, 3, 8, 2, 7, 1, 0]:
        full, _ = fit(fixed)
        fixed[i] = float(np.float32(full[i]))
    full, err = fit(fixed)
    p, q = split(full)
    print(f"largest relative error (double): {err:.3g}")
    print("kP = {" + ", ".join(repr(float(np.float32(v))) + "f" for v in p) + "}")
    print("kQ = {" + ", ".join(repr(float(np.float32(v))) + "f" for v in q) + "}")


if __name__ == "__main__":
    main()
