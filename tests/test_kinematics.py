"""Kinematic chains from URDF: link poses and Jacobians against Pinocchio on real robots
(Panda, UR5, Baxter, Talos from example-robot-data) and against pytorch_kinematics; a small
tree with mimic joints against an independent NumPy product of homogeneous matrices; the
closed-form derivatives against central differences, torch gradcheck and JAX check_grads
(vmap, jit); bad URDFs and bad calls."""

import site
from pathlib import Path

import numpy as np
import pytest
from helpers import STEP, as_tuple, check_grads, hessian_by_differences

import xform
from xform.kinematics import Chain


def fields(poses: xform.SE3):
    """forward_kinematics' SE3 as the functional API's (position, quaternion) pair."""
    assert isinstance(poses, xform.SE3)
    return poses.position, poses.quaternion


def _robots_dir() -> Path | None:
    for base in site.getsitepackages():
        path = Path(base) / "cmeel.prefix" / "share" / "example-robot-data" / "robots"
        if path.is_dir():
            return path
    return None


ROBOTS_DIR = _robots_dir()
ROBOTS = {
    "panda": "panda_description/urdf/panda.urdf",  # a mimic finger
    "ur5": "ur_description/urdf/ur5_robot.urdf",
    "baxter": "baxter_description/urdf/baxter.urdf",  # a tree: two arms, a head
    "talos": "talos_data/robots/talos_full_v2.urdf",  # a humanoid, mimic grippers
}


def robot_path(name: str) -> Path:
    if ROBOTS_DIR is None:
        pytest.skip("example-robot-data is not installed")
    return ROBOTS_DIR / ROBOTS[name]


# A tree with every supported joint kind, a mimic finger (multiplier and offset), a mimic of
# a mimic, a continuous joint, an unaligned axis and an rpy origin; links listed out of
# topological order.
TREE = """<?xml version="1.0"?>
<robot name="tree">
  <link name="finger_b"/>
  <link name="base"/>
  <link name="upper"/>
  <link name="wrist"/>
  <link name="finger_a"/>
  <link name="tip"/>
  <link name="side"/>
  <link name="slider"/>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="upper"/>
    <origin xyz="0 0 0.3" rpy="0.1 -0.2 0.3"/><axis xyz="0 0 1"/>
  </joint>
  <joint name="elbow" type="continuous">
    <parent link="upper"/><child link="wrist"/>
    <origin xyz="0.4 0.05 0" rpy="1.2 0.3 -0.7"/><axis xyz="1 2 -0.5"/>
  </joint>
  <joint name="finger_a_joint" type="prismatic">
    <parent link="wrist"/><child link="finger_a"/>
    <origin xyz="0 0.02 0.1"/><axis xyz="0 1 0"/>
  </joint>
  <joint name="finger_b_joint" type="prismatic">
    <parent link="wrist"/><child link="finger_b"/>
    <origin xyz="0 -0.02 0.1" rpy="0 0 3.14159"/><axis xyz="0 1 0"/>
    <mimic joint="finger_a_joint" multiplier="-2.0" offset="0.01"/>
  </joint>
  <joint name="tip_joint" type="revolute">
    <parent link="finger_b"/><child link="tip"/>
    <origin xyz="0 0 0.05" rpy="0.5 0 0"/><axis xyz="1 0 0"/>
    <mimic joint="finger_b_joint" multiplier="3.0" offset="-0.2"/>
  </joint>
  <joint name="side_joint" type="fixed">
    <parent link="base"/><child link="side"/>
    <origin xyz="0.1 0.2 0.3" rpy="0.3 0.2 0.1"/>
  </joint>
  <joint name="slide" type="prismatic">
    <parent link="side"/><child link="slider"/>
    <origin xyz="0 0 0.1" rpy="0 1.0 0"/><axis xyz="0.6 0 0.8"/>
  </joint>
</robot>
"""


def quaternion_matrix(q):
    w, x, y, z = np.moveaxis(np.asarray(q, dtype=np.float64), -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return np.stack([np.stack(r, -1) for r in rows], -2)


# --- an independent reference: homogeneous matrices, joint by joint ---------------------


def _rpy_matrix(r, p, y):
    cx, sx, cy, sy, cz, sz = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rz @ ry @ rx


def _axis_angle_matrix(axis, angle):
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def reference_poses(xml: str, joint_values: dict[str, float]) -> dict[str, np.ndarray]:
    """Each link's 4x4 pose from the URDF text, by its own small parser (ElementTree
    with no shared code), given every movable joint's value."""
    import xml.etree.ElementTree as ET

    robot = ET.fromstring(xml.encode())
    joints = {j.find("child").get("link"): j for j in robot.findall("joint")}
    poses = {}

    def pose(link):
        if link in poses:
            return poses[link]
        if link not in joints:
            poses[link] = np.eye(4)
            return poses[link]
        joint = joints[link]
        origin = joint.find("origin")
        xyz = [
            float(v)
            for v in (origin.get("xyz", "0 0 0") if origin is not None else "0 0 0").split()
        ]
        rpy = [
            float(v)
            for v in (origin.get("rpy", "0 0 0") if origin is not None else "0 0 0").split()
        ]
        local = np.eye(4)
        local[:3, :3], local[:3, 3] = _rpy_matrix(*rpy), xyz
        motion = np.eye(4)
        kind = joint.get("type")
        if kind != "fixed":
            axis_element = joint.find("axis")
            axis = np.array([float(v) for v in axis_element.get("xyz").split()])
            axis = axis / np.linalg.norm(axis)
            value = joint_values[joint.get("name")]
            if kind in ("revolute", "continuous"):
                motion[:3, :3] = _axis_angle_matrix(axis, value)
            else:
                motion[:3, 3] = axis * value
        poses[link] = pose(joint.find("parent").get("link")) @ local @ motion
        return poses[link]

    for link in robot.findall("link"):
        pose(link.get("name"))
    return poses


def tree_joint_values(q):
    shoulder, elbow, finger_a, slide = q
    finger_b = -2.0 * finger_a + 0.01
    return {
        "shoulder": shoulder,
        "elbow": elbow,
        "finger_a_joint": finger_a,
        "finger_b_joint": finger_b,
        "tip_joint": 3.0 * finger_b - 0.2,
        "slide": slide,
    }


@pytest.fixture(scope="module")
def tree():
    return Chain.from_urdf(TREE)


def test_tree_model(tree):
    assert tree.joint_names == ("shoulder", "elbow", "finger_a_joint", "slide")
    assert tree.dof == 4
    assert tree.link_names[0] == "base"
    assert set(tree.link_names) == {
        "base", "upper", "wrist", "finger_a", "finger_b", "tip", "side", "slider"
    }  # fmt: skip
    for k, parent in enumerate(tree.parents[1:], start=1):
        assert 0 <= parent < k  # parents first
    with pytest.raises(AttributeError, match="immutable"):
        tree.dof = 3
    with pytest.raises(ValueError, match="read-only"):
        tree.model.table[0, 0] = 1.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tree_poses_match_matrix_products(tree, dtype, rng):
    q = rng.uniform(-3, 3, (5, tree.dof))
    q[0] = 0.0
    positions, quaternions = fields(tree.forward_kinematics(q.astype(dtype)))
    assert positions.dtype == dtype and quaternions.dtype == dtype
    assert positions.shape == (5, 8, 3) and quaternions.shape == (5, 8, 4)
    tolerance = 1e-12 if dtype == np.float64 else 2e-5
    for b in range(len(q)):
        want = reference_poses(TREE, tree_joint_values(q[b]))
        for k, link in enumerate(tree.link_names):
            np.testing.assert_allclose(positions[b, k], want[link][:3, 3], atol=tolerance)
            np.testing.assert_allclose(
                quaternion_matrix(quaternions[b, k]), want[link][:3, :3], atol=tolerance
            )


def test_tree_jacobian_matches_differences_of_the_reference(tree, rng):
    """Each column: the link origin's velocity and the angular velocity (from dR R^T) for
    a unit rate of one coordinate, by central differences of the matrix reference."""
    q = rng.uniform(-3, 3, tree.dof)
    h = 1e-6
    for link in tree.link_names:
        got = tree.jacobian(q, link)
        for c in range(tree.dof):
            step = np.zeros(tree.dof)
            step[c] = h
            plus = reference_poses(TREE, tree_joint_values(q + step))[link]
            minus = reference_poses(TREE, tree_joint_values(q - step))[link]
            here = reference_poses(TREE, tree_joint_values(q))[link]
            linear = (plus[:3, 3] - minus[:3, 3]) / (2 * h)
            spin = (plus[:3, :3] - minus[:3, :3]) / (2 * h) @ here[:3, :3].T
            angular = np.array([spin[2, 1], spin[0, 2], spin[1, 0]])
            np.testing.assert_allclose(got[:3, c], linear, atol=1e-7)
            np.testing.assert_allclose(got[3:, c], angular, atol=1e-7)


def test_links_subset_and_batch_shapes(tree, rng):
    q = rng.normal(size=(2, 3, tree.dof))
    positions, quaternions = fields(tree.forward_kinematics(q))
    assert positions.shape == (2, 3, 8, 3)
    chosen = ["tip", "base", "tip"]
    sub_positions, sub_quaternions = fields(tree.forward_kinematics(q, links=chosen))
    index = [tree.link_names.index(n) for n in chosen]
    np.testing.assert_array_equal(sub_positions, positions[..., index, :])
    np.testing.assert_array_equal(sub_quaternions, quaternions[..., index, :])
    single, _ = fields(tree.forward_kinematics(q[0, 0]))
    np.testing.assert_array_equal(single, positions[0, 0])
    empty_positions, empty_quaternions = fields(tree.forward_kinematics(np.zeros((0, tree.dof))))
    assert empty_positions.shape == (0, 8, 3) and empty_quaternions.shape == (0, 8, 4)
    assert tree.jacobian(np.zeros((0, tree.dof)), "tip").shape == (0, 6, tree.dof)
    strided = np.asfortranarray(q.reshape(6, tree.dof))[::2]
    np.testing.assert_array_equal(
        fields(tree.forward_kinematics(strided))[0],
        fields(tree.forward_kinematics(strided.copy()))[0],
    )
    root_positions, root_quaternions = fields(tree.forward_kinematics(q, links=["base"]))
    np.testing.assert_array_equal(root_positions, 0.0)
    np.testing.assert_array_equal(root_quaternions[..., 0], 1.0)
    np.testing.assert_array_equal(tree.jacobian(q, "base"), 0.0)


# --- Pinocchio ------------------------------------------------------------------------------


def pinocchio_comparison(name, rng, configurations=2):
    """Max errors of every link's pose and of Jacobians against Pinocchio, for random
    float64 configurations. Pinocchio's model treats mimic joints as independent (mimic
    tags ignored), orders its joints depth first, and keeps a continuous joint as (cos,
    sin) in q: each of its coordinates is set explicitly from the joint's value, by name,
    and its Jacobian columns are folded into ours (a mimic's column times its multiplier
    into its master's)."""
    pin = pytest.importorskip("pinocchio")
    path = robot_path(name)
    chain = Chain.from_urdf(path)
    model = pin.buildModelFromUrdf(str(path))
    data = model.createData()
    joint_of = {model.names[j]: model.joints[j] for j in range(1, model.njoints)}
    q = rng.uniform(-3.0, 3.0, (configurations, chain.dof))
    positions, quaternions = fields(chain.forward_kinematics(q))
    pose_error = jacobian_error = 0.0
    for b in range(configurations):
        q_pin = pin.neutral(model)
        fold = np.zeros((model.nv, chain.dof))  # Pinocchio's velocity -> our coordinates
        for k in range(1, chain.n_links):
            parent, kind, index, multiplier, offset = chain.model.joints[k]
            if kind == 0:
                continue
            joint = joint_of[chain.link_joints[k]]
            value = multiplier * q[b, int(index)] + offset
            if joint.nq == 2:  # continuous: (cos, sin)
                q_pin[joint.idx_q : joint.idx_q + 2] = np.cos(value), np.sin(value)
            else:
                q_pin[joint.idx_q] = value
            fold[joint.idx_v, int(index)] += multiplier
        pin.forwardKinematics(model, data, q_pin)
        pin.updateFramePlacements(model, data)
        pin.computeJointJacobians(model, data, q_pin)
        for k, link in enumerate(chain.link_names):
            frame = model.getFrameId(link, pin.BODY)
            placement = data.oMf[frame]
            pose_error = max(
                pose_error,
                np.abs(placement.translation - positions[b, k]).max(),
                np.abs(placement.rotation - quaternion_matrix(quaternions[b, k])).max(),
            )
            expected = pin.getFrameJacobian(model, data, frame, pin.LOCAL_WORLD_ALIGNED) @ fold
            got = chain.jacobian(q[b], link)
            jacobian_error = max(jacobian_error, np.abs(got - expected).max())
    return pose_error, jacobian_error


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_poses_and_jacobians_match_pinocchio(name, rng):
    pose_error, jacobian_error = pinocchio_comparison(name, rng)
    print(f"{name}: pose error {pose_error:.2e}, Jacobian error {jacobian_error:.2e}")
    assert pose_error <= 1e-12
    assert jacobian_error <= 1e-12


def test_matches_pytorch_kinematics(rng):
    """pytorch_kinematics keeps joint origins in float32 even in a float64 chain (its
    parser makes float32 tensors), so agreement is to float32's precision; it also
    treats Panda's mimic finger as an independent joint, given the mimic's value here."""
    torch = pytest.importorskip("torch")
    pk = pytest.importorskip("pytorch_kinematics")
    text = robot_path("panda").read_bytes()
    chain = Chain.from_urdf(text)
    peer = pk.build_chain_from_urdf(text).to(dtype=torch.float64)
    q = rng.uniform(-2.0, 2.0, (3, chain.dof))
    names = peer.get_joint_parameter_names()
    finger = chain.joint_names.index("panda_finger_joint1")
    q_peer = np.stack(
        [q[:, chain.joint_names.index(n) if n in chain.joint_names else finger] for n in names],
        -1,
    )
    frames = peer.forward_kinematics(torch.from_numpy(q_peer))
    positions, quaternions = fields(chain.forward_kinematics(torch.from_numpy(q)))
    for k, link in enumerate(chain.link_names):
        matrix = frames[link].get_matrix().numpy()
        np.testing.assert_allclose(positions[:, k].numpy(), matrix[:, :3, 3], atol=1e-6)
        np.testing.assert_allclose(
            quaternion_matrix(quaternions[:, k].numpy()), matrix[:, :3, :3], atol=1e-6
        )
    serial = pk.build_serial_chain_from_urdf(text, "panda_hand").to(dtype=torch.float64)
    arm = len(serial.get_joint_parameter_names())
    expected = serial.jacobian(torch.from_numpy(q[:, :arm])).numpy()
    got = chain.jacobian(torch.from_numpy(q), "panda_hand").numpy()
    np.testing.assert_allclose(got[..., :arm], expected, atol=1e-6)
    np.testing.assert_array_equal(got[..., arm:], 0.0)  # the fingers do not move the hand


# --- derivatives ---------------------------------------------------------------------------


def _functions(chain, link):
    return {
        "forward_kinematics": lambda q: fields(chain.forward_kinematics(q)),
        "jacobian": lambda q: (chain.jacobian(q, link),),
    }


def _ops(chain):
    return {"forward_kinematics": chain.forward_kinematics_op, "jacobian": chain.jacobian_op}


def _operands(chain, which, q, link):
    return chain.op_arguments(q, link if which == "jacobian" else None)


@pytest.mark.parametrize("which", ["forward_kinematics", "jacobian"])
def test_vjp_and_jvp_match_central_differences(tree, which, rng):
    """The closed forms against central differences of the values, float64: VJP per
    coordinate, JVP along a random direction, at random configurations and at zero."""
    link = "tip"
    fn = _functions(tree, link)[which]
    op = _ops(tree)[which]
    for q in (rng.uniform(-3, 3, (3, tree.dof)), np.zeros((1, tree.dof))):
        results = fn(q)
        cotangents = tuple(rng.normal(size=r.shape) for r in results)
        gradient = xform.vjp(op, _operands(tree, which, q, link), cotangents)[0]
        expected = np.zeros_like(q)
        for index in np.ndindex(q.shape):
            step = np.zeros_like(q)
            step[index] = STEP
            plus, minus = fn(q + step), fn(q - step)
            expected[index] = sum(
                float((c * (p - m)).sum()) for c, p, m in zip(cotangents, plus, minus)
            ) / (2 * STEP)
        np.testing.assert_allclose(gradient, expected, atol=1e-7)
        direction = rng.normal(size=q.shape)
        tangents = [direction] + [None] * (len(op.operands) - 1)
        got = xform.jvp(op, _operands(tree, which, q, link), tangents)
        got = got if isinstance(got, tuple) else (got,)
        plus, minus = fn(q + STEP * direction), fn(q - STEP * direction)
        for g, p, m in zip(got, plus, minus):
            np.testing.assert_allclose(g, (p - m) / (2 * STEP), atol=1e-7)


def test_forward_tangent_is_the_jacobian(tree, rng):
    """J dq gives every link's velocity; the quaternion's tangent is ½ (0, ω) q."""
    q = rng.uniform(-3, 3, tree.dof)
    dq = rng.normal(size=tree.dof)
    d_positions, d_quaternions = xform.jvp(
        tree.forward_kinematics_op, tree.op_arguments(q), [dq, None]
    )
    _, quaternions = fields(tree.forward_kinematics(q))
    for k, link in enumerate(tree.link_names):
        twist = tree.jacobian(q, link) @ dq
        np.testing.assert_allclose(d_positions[k], twist[:3], atol=1e-12)
        w, x, y, z = quaternions[k]
        left = np.array([[-x, -y, -z], [w, z, -y], [-z, w, x], [y, -x, w]])  # (0, ω) q
        np.testing.assert_allclose(d_quaternions[k], 0.5 * left @ twist[3:], atol=1e-12)


def test_a_batch_split_over_threads_equals_one_thread(tree, rng, monkeypatch):
    """A configuration weighs as much as 2 n_links small ops (`Op.work`), so a batch of a
    few thousand splits over the threads: the same poses, Jacobians and gradients, bit
    for bit, as in small batches on one thread."""
    from xform import _launch

    monkeypatch.setattr(_launch.threads, "THREADS", 2)
    count = -(-_launch.tiling.PARALLEL_MIN_ELEMENTS // int(tree.forward_kinematics_op.work)) + 7
    q = rng.uniform(-3, 3, (count, tree.dof))
    for op, extra in ((tree.forward_kinematics_op, []), (tree.jacobian_op, [3.0])):
        whole = [q, *tree.op_arguments(q)[1:], *extra]
        assert _launch.tiling.parts(_launch.buffers.prepare(op, whole)) == 2
        results = as_tuple(op(*whole))
        cotangents = [rng.normal(size=r.shape) for r in results]
        gradient = xform.vjp(op, whole, cotangents)[0]
        for start in range(0, count, 500):
            part = slice(start, start + 500)
            args = [q[part], *whole[1:]]
            for r, p in zip(results, as_tuple(op(*args))):
                np.testing.assert_array_equal(r[part], p)
            g = xform.vjp(op, args, [c[part] for c in cotangents])[0]
            np.testing.assert_array_equal(gradient[part], g)


def test_torch_gradcheck_and_dtypes(tree, rng):
    torch = pytest.importorskip("torch")
    q = torch.tensor(rng.uniform(-3, 3, (2, tree.dof)), requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q: fields(tree.forward_kinematics(q, links=["tip", "slider"])),
        (q,),
        check_forward_ad=True,
    )
    assert torch.autograd.gradcheck(lambda q: tree.jacobian(q, "tip"), (q,), check_forward_ad=True)
    positions, quaternions = fields(tree.forward_kinematics(q.detach().float()))
    assert positions.dtype == torch.float32 and quaternions.dtype == torch.float32
    np.testing.assert_allclose(
        positions.numpy(), fields(tree.forward_kinematics(q.detach().numpy()))[0], atol=2e-5
    )


def test_jax_check_grads_vmap_and_jit(tree, rng):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    q = jnp.asarray(rng.uniform(-3, 3, (2, tree.dof)))
    check_grads(
        lambda q: fields(tree.forward_kinematics(q, links=["tip", "slider", "upper"])), (q,)
    )
    check_grads(lambda q: tree.jacobian(q, "tip"), (q,))

    def loss(q):
        positions, quaternions = fields(tree.forward_kinematics(q))
        return (positions**2).sum() + (quaternions[..., 1] * tree.jacobian(q, "tip")[0, 0]).sum()

    gradients = jax.jit(jax.vmap(jax.grad(loss)))(q)
    for b in range(len(q)):
        np.testing.assert_allclose(gradients[b], jax.grad(loss)(q[b]), atol=1e-12)
    jitted = jax.jit(tree.forward_kinematics)(q)
    for got, want in zip(fields(jitted), fields(tree.forward_kinematics(np.asarray(q)))):
        np.testing.assert_array_equal(np.asarray(got), want)
    mapped = jax.vmap(lambda q: tree.jacobian(q, "tip"))(q)
    np.testing.assert_array_equal(np.asarray(mapped), tree.jacobian(np.asarray(q), "tip"))
    float32 = fields(tree.forward_kinematics(q.astype(jnp.float32)))[1]
    assert float32.dtype == jnp.float32


def test_torch_second_derivatives(tree, rng):
    """Double backward through FK and the Jacobian (float64): gradgradcheck, and the
    Hessian of a loss of the end effector against differences of its gradient."""
    torch = pytest.importorskip("torch")
    q = torch.tensor(rng.uniform(-3, 3, (2, tree.dof)), requires_grad=True)
    assert torch.autograd.gradgradcheck(
        lambda q: fields(tree.forward_kinematics(q, links=["tip", "slider"])), (q,)
    )
    assert torch.autograd.gradgradcheck(lambda q: tree.jacobian(q, "tip"), (q,))
    target = torch.tensor(rng.normal(size=3))

    def loss(q):
        position, quaternion = fields(tree.forward_kinematics(q, links=["tip"]))
        manipulability = tree.jacobian(q, "tip").square().sum()
        return (position - target).square().sum() + quaternion[..., 1].sum() + manipulability

    def gradient(q):
        q = q.clone().requires_grad_(True)
        return torch.autograd.grad(loss(q), q)[0]

    q0 = q.detach()[0]
    hessian = torch.func.hessian(loss)(q0)
    differences = hessian_by_differences(
        lambda z: gradient(torch.from_numpy(z)).numpy(), q0.numpy()
    )
    np.testing.assert_allclose(hessian.numpy(), differences, atol=1e-6)


def test_jax_second_derivatives(tree, rng):
    """check_grads(order=2) through FK and the Jacobian; jax.hessian under jit and vmap."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    q = jnp.asarray(rng.uniform(-3, 3, (2, tree.dof)))
    check_grads(lambda q: fields(tree.forward_kinematics(q, links=["tip", "upper"])), (q,), order=2)
    check_grads(lambda q: tree.jacobian(q, "tip"), (q,), order=2)

    def loss(q):
        position, quaternion = fields(tree.forward_kinematics(q, links=["tip"]))
        return (position**2).sum() + quaternion[..., 2].sum() + tree.jacobian(q, "tip").sum()

    hessians = jax.jit(jax.vmap(jax.hessian(loss)))(q)
    for b in range(len(q)):
        np.testing.assert_allclose(hessians[b], jax.hessian(loss)(q[b]), atol=1e-12)
        np.testing.assert_allclose(hessians[b], hessians[b].T, atol=1e-12)


# --- bad input -----------------------------------------------------------------------------

BASE = """<robot name="r">
  <link name="a"/><link name="b"/><link name="c"/>
  <joint name="j1" type="revolute"><parent link="a"/><child link="b"/><axis xyz="0 0 1"/></joint>
  {joint}
</robot>"""

BAD_URDFS = {
    "floating": (
        '<joint name="free" type="floating"><parent link="b"/><child link="c"/></joint>',
        "free",
    ),
    "planar": (
        '<joint name="flat" type="planar"><parent link="b"/><child link="c"/></joint>',
        "flat",
    ),
    "missing parent link": (
        '<joint name="j2" type="fixed"><parent link="ghost"/><child link="c"/></joint>',
        "ghost",
    ),
    "cycle": (
        '<joint name="j2" type="fixed"><parent link="b"/><child link="c"/></joint>'
        '<joint name="j3" type="fixed"><parent link="c"/><child link="a"/></joint>',
        "cycle",
    ),
    "closed loop": (
        '<joint name="j2" type="fixed"><parent link="b"/><child link="c"/></joint>'
        '<joint name="j3" type="fixed"><parent link="a"/><child link="c"/></joint>',
        "'c'",
    ),
    "several roots": ("", "several root links ['a', 'c']"),
    "unknown mimic": (
        '<joint name="j2" type="revolute"><parent link="b"/><child link="c"/>'
        '<mimic joint="nope"/></joint>',
        "nope",
    ),
    "zero axis": (
        '<joint name="j2" type="revolute"><parent link="b"/><child link="c"/>'
        '<axis xyz="0 0 0"/></joint>',
        "j2",
    ),
    "bad origin": (
        '<joint name="j2" type="fixed"><parent link="b"/><child link="c"/>'
        '<origin xyz="1 2"/></joint>',
        "j2",
    ),
    "unknown type": (
        '<joint name="j2" type="screw"><parent link="b"/><child link="c"/></joint>',
        "screw",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_URDFS))
def test_bad_urdf_raises_naming_the_culprit(case):
    joint, culprit = BAD_URDFS[case]
    with pytest.raises(ValueError, match=culprit.replace("[", r"\[").replace("]", r"\]")):
        Chain.from_urdf(BASE.format(joint=joint))


def test_cycle_with_a_root_elsewhere():
    xml = """<robot name="r"><link name="a"/><link name="b"/><link name="c"/><link name="d"/>
      <joint name="j1" type="revolute"><parent link="a"/><child link="b"/></joint>
      <joint name="j2" type="fixed"><parent link="c"/><child link="d"/></joint>
      <joint name="j3" type="fixed"><parent link="d"/><child link="c"/></joint></robot>"""
    with pytest.raises(ValueError, match=r"\['c', 'd'\] form a cycle"):
        Chain.from_urdf(xml)


def test_bad_documents():
    with pytest.raises(ValueError, match="well-formed"):
        Chain.from_urdf("<robot><link name='a'></robot>")
    with pytest.raises(ValueError, match="<robot>"):
        Chain.from_urdf("<sdf/>")
    with pytest.raises(ValueError, match="cannot read"):
        Chain.from_urdf("/nonexistent/robot.urdf")
    with pytest.raises(ValueError, match="no movable joint"):
        Chain.from_urdf(
            BASE.replace('type="revolute"', 'type="fixed"').format(
                joint='<joint name="j2" type="fixed"><parent link="b"/><child link="c"/></joint>'
            )
        )


def test_bad_calls_raise_naming_the_culprit(tree):
    with pytest.raises(ValueError, match=r"q has shape \(2, 3\); expected \(\.\.\., 4\)"):
        tree.forward_kinematics(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"q has shape \(\)"):
        tree.jacobian(np.zeros(()), "tip")
    with pytest.raises(ValueError, match="unknown link 'hand'"):
        fields(tree.forward_kinematics(np.zeros(4), links=["tip", "hand"]))
    with pytest.raises(ValueError, match="unknown link 'hand'"):
        tree.jacobian(np.zeros(4), "hand")
    with pytest.raises(TypeError, match="sequence of link names"):
        fields(tree.forward_kinematics(np.zeros(4), links="tip"))
    with pytest.raises(TypeError, match="float32 or float64"):
        fields(tree.forward_kinematics(np.zeros(4, dtype=np.int64)))


def test_ops_called_by_hand_with_a_malformed_model_stay_in_bounds(tree, rng):
    """The ops take the model table as an operand: whatever it holds (a parent after its
    child, a coordinate past q, a link past the table), they read nothing out of bounds
    and end."""
    q = rng.normal(size=(3, tree.dof))
    table = np.array(tree.model.table)
    table[3, 0] = 7.0  # a parent that comes later
    table[4, 2] = 99.0  # a coordinate past q
    table[5, 0] = -3.0
    positions, _ = tree.forward_kinematics_op(q, table)
    assert np.isfinite(positions).all()
    for link in (-1.0, 8.0, 1e9, np.nan):
        np.testing.assert_array_equal(tree.jacobian_op(q, table, link), 0.0)
    np.testing.assert_array_equal(
        tree.jacobian_op(q, tree.model.table, 5.0), tree.jacobian(q, tree.link_names[5])
    )


@pytest.mark.parametrize(
    ("xyz", "axis"), [("0 0 1e300", [0, 0, 1]), ("1e-200 0 0", [1, 0, 0]), ("0 -1e308 1e308", None)]
)
def test_extreme_axes_are_normalised_without_overflow_or_underflow(xyz, axis):
    """The axis is scaled by its largest component before its norm: 1e300 squared
    overflows, 1e-200 squared underflows."""
    xml = BASE.format(joint="").replace('<axis xyz="0 0 1"/>', f'<axis xyz="{xyz}"/>')
    xml = xml.replace('<link name="c"/>', "")
    chain = Chain.from_urdf(xml)
    axis = np.array([0.0, -1.0, 1.0]) / np.sqrt(2.0) if axis is None else np.array(axis, float)
    np.testing.assert_allclose(chain.model.axes[1], axis, rtol=0, atol=1e-16)
    q = 1.0
    quaternion = chain.forward_kinematics(np.array([q])).quaternion[1]
    np.testing.assert_allclose(quaternion, [np.cos(q / 2), *(np.sin(q / 2) * axis)], atol=1e-15)
