"""The least an eager PyTorch solve of a small 3D pose graph costs: plain `torch` calls, as
few as they can be, against xform through PyTorch and GTSAM, interleaved in one process.

    python -m benchmarks.pose_graph_torch_floor [--graph tinyGrid3D] [--repeats 200]
        [--without-xform] [--out FILE]

`benchmarks.pose_graph`'s `eager_floor` is the same algorithm as xform's with xform's ops:
it measures what xform's generality costs. This one owes nothing to xform: the fewest-call
eager PyTorch solve we could write, an upper bound on the least an eager solve of a graph
this small costs, against GTSAM's (benchmarks/NOTES.md 63). Written for the fewest calls,
not for reading or for generality (one SE(3) graph, no checks, no batch):

- the state is each pose's 4x4 matrix T and its inverse transpose, interleaved, so that
  every edge's T_i^-1 T_j is one gather and one batched product, and a step updates both
  in one product;
- the residual is the exact SE(3) log of Z_ij^-1 T_i^-1 T_j, tangent order (rotation,
  translation) as GTSAM's; the information reordered from g2o's (translation, rotation);
- the Jacobians use the exact inverse right Jacobian, I + ad/2 + a ad^2 + b ad^4, with a and
  b by their Taylor series in theta^2 (to below 1e-12 for theta < 2 rad; `check_angles`
  refuses a graph whose residuals leave that range);
- the whitened [-J | e] of every edge goes into the normal equations, gradient and cost
  (in the corner) by one `index_add`; a damped Cholesky solve; the step by the closed-form
  exponential of the 4x4 twists; a Levenberg-Marquardt rule with GTSAM's default constants
  (lambda from 1e-5, times or over 10, stop at a relative or absolute decrease below 1e-5;
  a step is taken on any decrease, where GTSAM asks the model's prediction to hold);
- the chordal start dense: rotations' matrices by one Cholesky solve, one batched SVD
  projection, then translations by one Cholesky solve (weighted by the mean rotation
  precision and the unrotated translation information: a start needs no exact weights);
  vertex 0 at the identity (the cost is gauge-free).

Left in that a solve could do without: each trial point is linearised whole, so the last
(accepted) one's Jacobians go unused, ~50 of ~465 calls here.

Reports per solve the minimum and median of `--repeats` (after 20 warm-up solves) for the
start, the LM and the whole, the three interleaved (with `--without-xform`, the floor and
GTSAM alone: each then finds more of its code and data in the caches); each one's final
cost; and the torch calls each part makes (Python-level calls, aten dispatches).
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from fractions import Fraction  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import xform  # noqa: E402
from benchmarks.pose_graph import DATA, gtsam_run, xform_run  # noqa: E402
from xform.optim.g2o import read_g2o  # noqa: E402

F64 = torch.float64
PI = math.pi
# The inverse right Jacobian of SE(3) is I + ad/2 + a(theta) ad^2 + b(theta) ad^4 (ad's
# minimal polynomial is x (x^2 + theta^2)^2). a and b in powers of theta^2, from
# x/2 coth(x/2) (sympy); 13 terms reach 1e-12 below theta = 2 rad.
A_SERIES = ["1/12", "0", "-1/30240", "-1/604800", "-1/15966720", "-691/326918592000",
            "-1/14944849920", "-3617/1778437140480000", "-43867/729870602452992000",
            "-174611/100357207837286400000", "-77683/1566788893265756160000",
            "-236364091/169382413673174366945280000",
            "-657931/16921320047270166528000000"]  # fmt: skip
B_SERIES = ["-1/720", "-1/15120", "-1/403200", "-1/11975040", "-691/261534873600",
            "-1/12454041600", "-3617/1524374691840000", "-43867/638636777146368000",
            "-174611/89206406966476800000", "-77683/1410110003939180544000",
            "-236364091/153984012430158515404800000", "-657931/15511210043330985984000000",
            "-3392780147/2914866591342758886113280000000"]  # fmt: skip
SERIES_UP_TO = 2.0  # rad
TERMS = len(A_SERIES) - 1


def _matrix_of_quaternions(q: np.ndarray) -> np.ndarray:
    """Rotation matrices of quaternions (k, 4) [w, x, y, z] by xform's op (untimed set-up),
    normalised first: a file's are unit only to its printed digits, 4e-8 off in tinyGrid3D,
    and R^T would then be 3e-7 from R^-1."""
    return xform.quaternion_to_matrix(q / np.linalg.norm(q, axis=1, keepdims=True))


class PlainTorchSolve:
    """One SE(3) g2o graph's solve in plain torch. The file read and its arrays made into
    tensors, and everything that depends only on the graph's structure, are made here,
    untimed (xform's and GTSAM's reading is untimed too); `prepared`, `chordal` and
    `levenberg_marquardt` are what a solve pays."""

    def __init__(self, path: Path):
        graph = read_g2o(path)
        if graph.dim != 3:
            raise ValueError(f"{path}: a 3D graph wanted, got dim={graph.dim}")
        ids = np.unique(graph.edge_ids)
        n, m = len(ids), len(graph.edge_ids)
        i, j = (torch.as_tensor(np.searchsorted(ids, graph.edge_ids[:, k])) for k in (0, 1))
        self.n, self.m, self.i = n, m, i
        self.measured_rotations = torch.as_tensor(
            _matrix_of_quaternions(graph.edge_rotations), dtype=F64
        )
        self.measured_positions = torch.as_tensor(graph.edge_positions, dtype=F64)
        order = np.r_[3:6, 0:3]  # g2o's (translation, rotation) -> (rotation, translation)
        self.information = torch.as_tensor(
            graph.edge_information[:, order][:, :, order].copy(), dtype=F64
        )

        hat = torch.zeros(3, 3, 3, dtype=F64)  # hat[k] = e_k^
        hat[0, 2, 1], hat[0, 1, 2], hat[1, 0, 2] = 1, -1, 1
        hat[1, 2, 0], hat[2, 1, 0], hat[2, 0, 1] = -1, 1, -1
        self.hat = hat
        ad = torch.zeros(6, 6, 6, dtype=F64)  # ad(xi) = [[w^, 0], [rho^, w^]]
        twist = torch.zeros(6, 4, 4, dtype=F64)  # se(3)'s 4x4 hat
        for k in range(3):
            ad[k, :3, :3] = ad[k, 3:, 3:] = ad[3 + k, 3:, :3] = hat[k]
            twist[k, :3, :3], twist[3 + k, k, 3] = hat[k], 1
        self.minus_half_ad = (-0.5 * ad).reshape(6, 36)  # e @ it: -ad(e)/2
        # A step d (6 (n - 1), 1), pose 0 fixed, to every pose's [X^ ; -X^T], interleaved,
        # and to theta^2 / pi^2 of each
        to_twists = torch.zeros(n, 2, 4, 4, n - 1, 6, dtype=F64)
        to_angles = torch.zeros(n, 2, n - 1, 6, dtype=F64)
        for p in range(1, n):
            to_twists[p, 0, :, :, p - 1] = twist.permute(1, 2, 0)
            to_twists[p, 1, :, :, p - 1] = -twist.permute(2, 1, 0)
            to_angles[p, :, p - 1, :3] = 1 / PI**2
        self.to_twists = to_twists.reshape(32 * n, 6 * (n - 1))
        self.to_angles = to_angles.reshape(2 * n, 6 * (n - 1))
        # vec(E) (16) -> [vee(R - R^T) / 2 = sin(theta) axis, (tr R + 1) / 2 = 1 + cos(theta), t]
        parts = torch.zeros(16, 7, dtype=F64)
        parts[9, 0], parts[6, 0], parts[2, 1], parts[8, 1], parts[4, 2], parts[1, 2] = (
            0.5, -0.5, 0.5, -0.5, 0.5, -0.5
        )  # fmt: skip
        parts[[0, 5, 10, 15], 3] = 0.5
        parts[3, 4], parts[7, 5], parts[11, 6] = 1, 1, 1
        self.parts = parts

        size = 6 * n + 1  # the normal equations bordered by the gradient and the cost
        rows = torch.cat(
            [6 * i[:, None] + torch.arange(6), 6 * j[:, None] + torch.arange(6),
             torch.full((m, 1), 6 * n)], 1,
        )  # fmt: skip
        self.size = size
        self.normal_slots = (rows[:, :, None] * size + rows[:, None, :]).reshape(-1)
        self.normal_zeros = torch.zeros(size * size, dtype=F64)
        self.damping_eye = torch.eye(6 * (n - 1), dtype=F64)
        rows3 = torch.cat([3 * i[:, None] + torch.arange(3), 3 * j[:, None] + torch.arange(3)], 1)
        self.start_slots = (rows3[:, :, None] * (3 * n) + rows3[:, None, :]).reshape(-1)
        self.start_zeros = torch.zeros(9 * n * n, dtype=F64)
        self.start_gradient_slots = rows3.reshape(-1)
        self.start_gradient_zeros = torch.zeros(3 * n, dtype=F64)
        self.eye3 = torch.eye(3, dtype=F64).expand(m, 3, 3)
        self.eye6 = torch.eye(6, dtype=F64).expand(m, 6, 6)
        self.eye4 = torch.eye(4, dtype=F64)
        self.half_eye4 = 0.5 * self.eye4
        self.bottom_rows = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=F64).expand(m, 1, 4)
        self.gathered = torch.cat([2 * i + 1, 2 * j])  # T_i^-T, then T_j
        self.minus_eye3 = -torch.eye(3, dtype=F64)[None]
        difference = torch.cat([torch.eye(3, dtype=F64), -torch.eye(3, dtype=F64)], 1)
        self.difference = difference.expand(m, 3, 6)
        self.difference_t = self.difference.mT.contiguous()
        self.measured_positions_column = self.measured_positions[:, :, None].contiguous()
        self.zero3 = torch.zeros(3, dtype=F64)
        # [-R^T (9), t (3), -R^T t (3)] of each pose -> its interleaved [T ; T^-T]
        build = torch.zeros(15, 2, 4, 4, dtype=F64)
        corner = torch.zeros(2, 4, 4, dtype=F64)
        for r in range(3):
            for c in range(3):
                build[3 * r + c, 0, c, r] = -1
                build[3 * r + c, 1, c, r] = -1
            build[9 + r, 0, r, 3] = 1
            build[12 + r, 1, 3, r] = 1
        corner[0, 3, 3] = corner[1, 3, 3] = 1
        self.build, self.corner = build.reshape(15, 32), corner.reshape(1, 32)
        self.tiny = torch.tensor(1e-30, dtype=F64)
        self.tiny_angle = torch.tensor(1e-13, dtype=F64)
        series = torch.tensor(  # in powers of (theta / pi)^2: 4a and 16b
            [[float(Fraction(a)) * 4 * PI ** (2 * k), float(Fraction(b)) * 16 * PI ** (2 * k)]
             for k, (a, b) in enumerate(zip(A_SERIES, B_SERIES))], dtype=F64,
        )  # fmt: skip
        self.series_first, self.series_rest = series[:1].clone(), series[1:].clone()
        self.two_over_pi = torch.tensor(2 / PI, dtype=F64)

    # --- a solve: the start ----------------------------------------------------------------

    def prepared(self):
        """Per measurement: the Jacobians' constant factors and the whitening."""
        m, rotations_t = self.m, self.measured_rotations.mT
        position = -torch.bmm(rotations_t, self.measured_positions_column)  # of Z^-1
        inverse = torch.cat([torch.cat([rotations_t, position], 2), self.bottom_rows], 1)
        position_hat = torch.mm(position.view(m, 3), self.hat.view(3, 9)).view(m, 3, 3)
        adjoint = torch.cat(  # Ad(Z^-1)
            [torch.cat([rotations_t, torch.zeros_like(rotations_t)], 2),
             torch.cat([torch.bmm(position_hat, rotations_t), rotations_t], 2)], 1,
        )  # fmt: skip
        with_eye = torch.cat([adjoint, self.eye6], 2)
        with_minus_eye = torch.cat([adjoint, -self.eye6], 2)
        whitening = torch.linalg.cholesky(self.information).mT
        relative_parts = self.parts.T @ torch.kron(inverse, self.eye4)  # of Z^-1 S
        return with_eye, with_minus_eye, whitening, relative_parts

    def chordal(self):
        """The interleaved [T ; T^-T] of the chordal start."""
        n, i = self.n, self.i
        kappa = self.information[:, :3, :3].diagonal(dim1=1, dim2=2).mean(1)[:, None, None]
        # Y = R^T: rows Y_j - R_ij^T Y_i, Y_0 = I
        rows = torch.cat([-self.measured_rotations.mT, self.eye3], 2)
        normal = torch.index_add(
            self.start_zeros, 0, self.start_slots, torch.bmm(rows.mT * kappa, rows).view(-1)
        ).view(3 * n, 3 * n)
        minus_y = torch.cholesky_solve(
            normal[3:, :3], torch.linalg.cholesky_ex(normal[3:, 3:])[0]
        ).view(n - 1, 3, 3)
        u, _, vh = torch.linalg.svd(minus_y)
        nearest = torch.bmm(u, vh)  # -R^T's nearest: u diag(1, 1, -det(u vh)) vh
        vh[:, 2] *= -(torch.linalg.cross(nearest[:, 0], nearest[:, 1]) * nearest[:, 2]).sum(
            1, keepdim=True
        )
        minus_rt = torch.cat([self.minus_eye3, torch.bmm(u, vh)])
        # t_j - t_i = R_i t_ij, weighted by the translations' information
        weighted = torch.bmm(self.information[:, 3:, 3:], self.difference)
        normal = torch.index_add(
            self.start_zeros, 0, self.start_slots, torch.bmm(self.difference_t, weighted).view(-1)
        ).view(3 * n, 3 * n)
        rotated = torch.bmm(minus_rt.index_select(0, i).mT, self.measured_positions_column)
        gradient = torch.index_add(
            self.start_gradient_zeros, 0, self.start_gradient_slots,
            torch.bmm(weighted.mT, rotated).view(-1),
        )  # fmt: skip
        t = torch.cholesky_solve(gradient[3:, None], torch.linalg.cholesky_ex(normal[3:, 3:])[0])
        t = torch.cat([self.zero3, t.view(-1)])
        z = torch.cat(
            [minus_rt.view(n, 9), t.view(n, 3), torch.bmm(minus_rt, t.view(n, 3, 1)).view(n, 3)], 1
        )
        return torch.addmm(self.corner, z, self.build).view(2 * n, 4, 4)

    # --- a solve: Levenberg-Marquardt ------------------------------------------------------

    def residuals(self, state, prepared):
        """(m, 6) Log(Z^-1 T_i^-1 T_j) and (m, 1) theta / pi."""
        m, relative_parts = self.m, prepared[3]
        gathered = state.index_select(0, self.gathered)
        relative = torch.bmm(gathered[:m].mT, gathered[m:])
        parts = torch.bmm(relative_parts, relative.view(m, 16, 1)).view(m, 7)
        w, one_plus_cos, t = parts[:, :3], parts[:, 3:4], parts[:, 4:]
        angle = torch.atan2(torch.linalg.vector_norm(w, dim=1, keepdim=True), one_plus_cos)
        angle = angle.mul_(self.two_over_pi)  # theta / pi
        sinc = torch.sinc(angle)
        omega = w / sinc
        cross = torch.linalg.cross(omega, t)
        square = angle * angle
        # (1 - theta sin / (2 (1 - cos))) / theta^2, times -2 pi^2
        c = torch.add(one_plus_cos, sinc, alpha=-2).div_(
            torch.add(square, self.tiny_angle).mul_(sinc)
        )
        rho = torch.addcmul(
            torch.add(t, cross, alpha=-0.5), c, torch.linalg.cross(omega, cross),
            value=-1.0 / (2 * PI**2),
        )  # fmt: skip
        return torch.cat([omega, rho], 1), square

    def even_part(self, half_ad, square):
        """I + a ad^2 + b ad^4 of each edge's residual e, the inverse right Jacobian's even
        part, from half_ad = -ad(e)/2 and square = (theta / pi)^2, both per edge."""
        m = self.m
        coefficients = torch.addmm(
            self.series_first, torch.cumprod(square.expand(m, TERMS), 1), self.series_rest
        )
        alpha, beta = coefficients.view(m, 2, 1, 1).unbind(1)
        half_ad2 = torch.bmm(half_ad, half_ad)
        return torch.baddbmm(self.eye6, half_ad2, torch.addcmul(alpha * self.eye6, beta, half_ad2))

    def linearised(self, state, prepared):
        """The bordered normal equations [[H, -g], [-g^T, 2 cost]] and 2 cost."""
        m = self.m
        with_eye, with_minus_eye, whitening, _ = prepared
        e, square = self.residuals(state, prepared)
        half_ad = torch.mm(e, self.minus_half_ad).view(m, 6, 6)  # -ad(e)/2
        even = self.even_part(half_ad, square)
        minus_jacobians = torch.baddbmm(torch.bmm(half_ad, with_eye), even, with_minus_eye)
        whitened = torch.bmm(whitening, torch.cat([minus_jacobians, e.unsqueeze(2)], 2))
        bordered = torch.index_add(
            self.normal_zeros, 0, self.normal_slots, torch.bmm(whitened.mT, whitened).view(-1)
        ).view(self.size, self.size)
        return bordered, bordered[-1, -1].item()

    def retracted(self, state, step):
        n = self.n
        twists = torch.mm(self.to_twists, step).view(2 * n, 4, 4)  # [X^ ; -X^T]
        angle = torch.mm(self.to_angles, step * step).sqrt_().view(2 * n, 1, 1)  # theta / pi
        half = torch.sinc(angle * 0.5)  # (1 - cos) / theta^2 = half^2 / 2
        third = torch.rsub(torch.sinc(angle), 1).div_(  # (theta - sin) / theta^3
            angle.square_().mul_(PI * PI).add_(self.tiny)
        )
        exponential = torch.baddbmm(  # I + X + X^2 (B + C X)
            twists + self.eye4, twists,
            torch.bmm(twists, torch.addcmul(half * half * self.half_eye4, third, twists)),
        )  # fmt: skip
        return torch.bmm(state, exponential)

    def levenberg_marquardt(self, state, prepared, damping=1e-5, tolerance=1e-5):
        """GTSAM's default rule. Returns (state, cost, iterations)."""
        bordered, chi2 = self.linearised(state, prepared)
        iterations = 0
        while iterations < 100:
            iterations += 1
            while True:
                factor, failed = torch.linalg.cholesky_ex(
                    torch.add(bordered[6:-1, 6:-1], self.damping_eye, alpha=damping)
                )
                if not failed.item():
                    trial = self.retracted(state, torch.cholesky_solve(bordered[6:-1, -1:], factor))
                    trial_bordered, trial_chi2 = self.linearised(trial, prepared)
                    if trial_chi2 < chi2:
                        break
                damping *= 10
                if damping > 1e5:
                    return state, 0.5 * chi2, iterations
            damping /= 10
            decrease = chi2 - trial_chi2
            state, bordered, before, chi2 = trial, trial_bordered, chi2, trial_chi2
            if decrease < tolerance * before or 0.5 * decrease < tolerance:
                break
        return state, 0.5 * chi2, iterations

    def check_angles(self, state, prepared) -> float:
        """The largest residual angle at `state`, refused above the series' range (checked
        at the start and the solution, not at every trial: another graph's trials could
        leave it unseen)."""
        largest = float(self.residuals(state, prepared)[1].max().sqrt() * PI)
        if largest >= SERIES_UP_TO:
            raise ValueError(f"a residual of {largest:.3f} rad: the series holds below 2 rad")
        return largest


def torch_calls(function) -> dict:
    """Python-level torch calls and aten dispatches of one call of `function`."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"torch calls": 0, "aten dispatches": 0}

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            counts["torch calls"] += 1
            return func(*args, **(kwargs or {}))

    class Dispatches(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts["aten dispatches"] += 1
            return func(*args, **(kwargs or {}))

    with Calls():
        function()
    with Dispatches():
        function()
    return counts


def summary(seconds: list[float]) -> dict:
    return {"min": min(seconds), "median": statistics.median(seconds)}


def measure(name: str, repeats: int, with_xform: bool = True) -> dict:
    path = DATA / f"{name}.g2o"
    solve = PlainTorchSolve(path)

    def plain():
        began = time.perf_counter()
        prepared = solve.prepared()
        start = solve.chordal()
        started = time.perf_counter()
        state, cost, iterations = solve.levenberg_marquardt(start, prepared)
        ended = time.perf_counter()
        return state, cost, iterations, started - began, ended - started

    times = {"plain torch": [], **({"xform torch": []} if with_xform else {}), "gtsam": []}
    parts = {"plain torch": [], "gtsam": []}
    for k in range(20 + repeats):
        state, cost, iterations, start_seconds, lm_seconds = plain()
        xform = xform_run(path, "torch") if with_xform else None
        gtsam = gtsam_run(path, True, None)
        if k >= 20:
            times["plain torch"].append(start_seconds + lm_seconds)
            parts["plain torch"].append((start_seconds, lm_seconds))
            if with_xform:
                times["xform torch"].append(xform["seconds"])
            times["gtsam"].append(gtsam["seconds"])
            parts["gtsam"].append((gtsam["init seconds"], gtsam["lm seconds"]))
    last = {"plain torch": (cost, iterations), "gtsam": (gtsam["error"], gtsam["iterations"])}
    if with_xform:
        last["xform torch"] = (xform["error"], xform["iterations"])
    prepared = solve.prepared()
    start = solve.chordal()
    largest_angle = max(solve.check_angles(start, prepared), solve.check_angles(state, prepared))
    step = torch.full((6 * (solve.n - 1), 1), 1e-3, dtype=F64)
    calls = {
        "start": torch_calls(lambda: (solve.prepared(), solve.chordal())),
        "linearisation": torch_calls(lambda: solve.linearised(start, prepared)),
        "retraction": torch_calls(lambda: solve.retracted(start, step)),
        "whole LM": torch_calls(lambda: solve.levenberg_marquardt(start, prepared)),
    }
    gtsam_seconds = statistics.median(times["gtsam"])
    row = {"graph": name, "repeats": repeats, "with xform": with_xform,
           "largest residual angle": largest_angle, "torch calls": calls}  # fmt: skip
    for key, seconds in times.items():
        row[key] = {
            **summary(seconds),
            "cost": last[key][0],
            "iterations": last[key][1],
            "over gtsam": statistics.median(seconds) / gtsam_seconds,
            "over gtsam per round": statistics.median(
                s / g for s, g in zip(seconds, times["gtsam"])
            ),
        }
    for key, pairs in parts.items():
        row[key]["start"] = summary([p[0] for p in pairs])
        row[key]["lm"] = summary([p[1] for p in pairs])
    row["plain torch"]["lm over gtsam lm per round"] = statistics.median(
        p[1] / g[1] for p, g in zip(parts["plain torch"], parts["gtsam"])
    )
    return row


def report(row: dict) -> None:
    print(f"{row['graph']}: {row['repeats']} solves each, interleaved; per solve")
    for key in ("plain torch", "xform torch", "gtsam"):
        if key not in row:
            continue
        r = row[key]
        parts = (f"  (start {r['start']['median'] * 1e3:.3f}, LM {r['lm']['median'] * 1e3:.3f})"
                 if "start" in r else "")  # fmt: skip
        print(f"  {key:12s} min {r['min'] * 1e3:6.3f} ms  median {r['median'] * 1e3:6.3f} ms"
              f"  {r['over gtsam']:5.2f}x GTSAM (per round {r['over gtsam per round']:.2f}x)"
              f"  cost {r['cost']:.12g}, {r['iterations']} iterations{parts}")  # fmt: skip
    print(f"  plain torch's LM alone: {row['plain torch']['lm over gtsam lm per round']:.2f}x "
          "GTSAM's LM per round")  # fmt: skip
    for part, counts in row["torch calls"].items():
        print(f"  plain torch, {part}: {counts['torch calls']} torch calls, "
              f"{counts['aten dispatches']} aten dispatches")  # fmt: skip


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="tinyGrid3D")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--without-xform", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    row = measure(args.graph, args.repeats, with_xform=not args.without_xform)
    report(row)
    if args.out:
        machine = {"platform": platform.platform(), "processor": platform.processor(),
                   "torch": torch.__version__}  # fmt: skip
        args.out.write_text(json.dumps({"machine": machine, "rows": [row]}, indent=1) + "\n")
    return row


if __name__ == "__main__":
    main()
