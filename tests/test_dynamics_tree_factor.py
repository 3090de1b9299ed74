"""The mass matrix factored along the tree (`M = L^T D L`, the factor behind forward dynamics
and its partials): on random symmetric positive definite matrices with a tree's sparsity,
against NumPy's solve and inverse; the slots a chain's bodies give, against M's zeros; and
Talos (a humanoid on a floating base, 38 coordinates) against Pinocchio's ABA."""

import numpy as np
import pytest
import warp as wp
from dynamics_reference import PinocchioReference, random_state, relative, robots_dir
from test_dynamics import JOINTS, LINKS, TREE, urdf

from xform.kinematics import Chain
from xform.kinematics._tree_factor import (
    tree_factor_forward_only,
    tree_inverse_forward_only,
    tree_slots,
    tree_solve_forward_only,
)

N = 9
_matrix = wp.types.matrix(shape=(N, N), dtype=wp.float64)
_vector = wp.types.vector(length=N, dtype=wp.float64)
_slots = wp.types.vector(length=N, dtype=wp.int32)


@wp.kernel
def _factor_solve_inverse(
    m: wp.array(dtype=_matrix),
    order: wp.array(dtype=_slots),
    parents: wp.array(dtype=_slots),
    b: wp.array(dtype=_vector),
    factor: wp.array(dtype=_matrix),
    x: wp.array(dtype=_vector),
    inverse: wp.array(dtype=_matrix),
):
    t = wp.tid()
    f = tree_factor_forward_only(m[t], order[t], parents[t])
    factor[t] = f
    x[t] = tree_solve_forward_only(f, order[t], parents[t], b[t])
    inverse[t] = tree_inverse_forward_only(f, order[t], parents[t])


def ancestors(parents, s) -> list[int]:
    found = []
    while parents[s] >= 0:
        s = parents[s]
        found.append(s)
    return found


def tree_matrix(rng, parents, order, scales):
    """M (coordinate order) = P^T L^T D L P with L unit lower triangular at (slot, ancestor)
    pairs, D = scales, and its L and D."""
    n = len(parents)
    lower = np.eye(n)
    for s in range(n):
        for j in ancestors(parents, s):
            lower[s, j] = rng.normal()
    slot_matrix = lower.T @ np.diag(scales) @ lower
    m = np.empty((n, n))
    m[np.ix_(order, order)] = slot_matrix
    return m, lower


def random_parents(rng, n, kind):
    if kind == "chain":
        return np.arange(n) - 1
    if kind == "star":
        return np.full(n, -1)
    return np.array([rng.integers(-1, s) if s else -1 for s in range(n)])


@pytest.mark.parametrize("kind", ["tree", "chain", "star"])
def test_factor_solve_inverse_match_numpy(kind, rng):
    cases = []
    for _ in range(16):
        parents = random_parents(rng, N, kind)
        order = rng.permutation(N)
        scales = np.exp(rng.uniform(-3, 3, N))
        scales[rng.integers(N)] *= 1e-9  # near singular
        cases.append((parents, order, scales))
    pairs = [tree_matrix(rng, *case) for case in cases]
    m = np.stack([p[0] for p in pairs])
    b = rng.normal(size=(len(cases), N))
    # M is zero between slots on different branches: the pattern the factor relies on
    for (parents, order, _), mi in zip(cases, m):
        related = np.eye(N, dtype=bool)
        for s in range(N):
            related[s, ancestors(parents, s)] = related[ancestors(parents, s), s] = True
        assert np.all(mi[np.ix_(order, order)][~related] == 0)
    arrays = [
        wp.array(m, dtype=_matrix),
        wp.array(np.stack([c[1] for c in cases]).astype(np.int32), dtype=_slots),
        wp.array(np.stack([c[0] for c in cases]).astype(np.int32), dtype=_slots),
        wp.array(b, dtype=_vector),
    ]
    outputs = [wp.empty(len(cases), dtype=t) for t in (_matrix, _vector, _matrix)]
    wp.launch(_factor_solve_inverse, len(cases), inputs=arrays, outputs=outputs, device="cpu")
    factor, x, inverse = (o.numpy() for o in outputs)
    eps = np.finfo(np.float64).eps
    for (_, order, d), (mi, lower), f, xi, inv, bi in zip(cases, pairs, factor, x, inverse, b):
        condition = np.linalg.cond(mi)
        size = np.abs(mi).max()
        # backward: the factor reproduces the M it was given to the rounding of its own
        # terms, |L^T| |D| |L| (Higham, Accuracy and Stability, 10.1); forward: D and L are
        # those M was made from to the condition number, as any factor of a rounded M is
        unit, pivots = np.tril(f, -1) + np.eye(N), np.diag(f)
        terms = np.abs(unit).T @ np.diag(np.abs(pivots)) @ np.abs(unit)
        rebuilt = unit.T @ np.diag(pivots) @ unit
        assert np.all(np.abs(rebuilt - mi[np.ix_(order, order)]) <= 4 * N * eps * terms)
        np.testing.assert_allclose(pivots, d, rtol=0, atol=1e-15 * condition * size)
        np.testing.assert_allclose(np.tril(f, -1), np.tril(lower, -1), atol=1e-15 * condition)
        assert np.all(np.triu(f, 1) == 0)
        want = np.linalg.solve(mi, bi)
        assert relative(xi, want) < 1e-15 * condition
        backward = np.abs(mi @ xi - bi).max() / (size * np.abs(xi).max() + np.abs(bi).max())
        assert backward < 1e-14
        assert relative(inv, np.linalg.inv(mi)) < 1e-15 * condition
        assert np.array_equal(inv, inv.T)


def slots(chain: Chain):
    """tree_slots of a chain's table, run as the ops run it."""
    nv, nq, bodies = chain.nv, chain.nq, chain.dynamics.bodies

    def vector(n, dtype=wp.float64):
        return wp.types.vector(length=n, dtype=dtype)

    @wp.kernel(module="unique")
    def run(
        q: wp.array(dtype=vector(nq)),
        velocities: wp.array(dtype=vector(nv)),
        table: wp.array(dtype=wp.types.matrix(shape=bodies.shape, dtype=wp.float64)),
        order: wp.array(dtype=vector(nv, wp.int32)),
        parents: wp.array(dtype=vector(nv, wp.int32)),
    ):
        o, p = tree_slots(q[0], velocities[0], table[0])
        order[0] = o
        parents[0] = p

    out = [wp.zeros(1, dtype=vector(nv, wp.int32)) for _ in range(2)]
    args = [
        wp.zeros(1, dtype=vector(nq)),
        wp.zeros(1, dtype=vector(nv)),
        wp.array(bodies[None], dtype=wp.types.matrix(shape=bodies.shape, dtype=wp.float64)),
    ]
    wp.launch(run, 1, inputs=args, outputs=out, device="cpu")
    return out[0].numpy()[0], out[1].numpy()[0]


TREES = [
    pytest.param(urdf(LINKS, [(*j[:7], None) for j in JOINTS]), True, id="tree"),
    pytest.param(TREE, False, id="mimic"),
]


@pytest.mark.parametrize(("text", "branches"), TREES)
@pytest.mark.parametrize("floating", [False, True], ids=["fixed", "floating"])
def test_slots_describe_the_mass_matrix_zeros(text, branches, floating, rng):
    chain = Chain.from_urdf(text, floating_base=floating)
    order, parents = slots(chain)
    assert sorted(order) == list(range(chain.nv))
    assert all(-1 <= p < s for s, p in enumerate(parents))
    if not branches:  # a mimic joint couples branches: one chain of the coordinates
        assert list(order) == list(range(chain.nv))
        assert list(parents) == list(range(-1, chain.nv - 1))
        return
    assert any(p != s - 1 for s, p in enumerate(parents))
    q, _, _ = random_state(chain, rng, (4,))
    m = chain.mass_matrix(q)[:, order][:, :, order]
    related = np.eye(chain.nv, dtype=bool)
    for s in range(chain.nv):
        related[s, ancestors(parents, s)] = related[ancestors(parents, s), s] = True
    assert np.all(m[:, ~related] == 0)


ROBOTS = robots_dir()


@pytest.mark.skipif(ROBOTS is None, reason="example-robot-data is not installed")
def test_talos_forward_dynamics_matches_pinocchio_aba(rng):
    path = ROBOTS / "talos_data/robots/talos_reduced.urdf"
    chain = Chain.from_urdf(path, floating_base=True)
    reference = PinocchioReference(chain, path)
    order, parents = slots(chain)
    assert sum(p != s - 1 for s, p in enumerate(parents)) >= 4  # legs, torso, arms, head
    q, v, tau = random_state(chain, rng, (6,))
    q[1, 7:] = 0.0  # the joints' zero: axes aligned
    q[2, 7:] = 1e-9
    q[3, 3:7] = [0.0, 1.0, 0.0, 0.0]  # upside down
    q[4, 7:] = np.pi
    a = chain.forward_dynamics(q, v, tau)
    for b in range(len(q)):
        assert relative(a[b], reference.forward_dynamics(q[b], v[b], tau[b])) < 1e-10
        got = chain.forward_dynamics_derivatives(q[b], v[b], tau[b])
        want = reference.aba_derivatives(q[b], v[b], tau[b])
        for g, w in zip(got, want):
            assert relative(g, w) < 1e-9
