"""LieTorch's classes (its `groups.py`): `SO3`, `RxSO3`, `SE3`, `Sim3`, `LieGroupParameter`,
`cat` and `stack`, with LieTorch's names, layouts and semantics, on xform's kernels.

Where LieTorch is silently wrong, these raise: a point whose last dimension is neither 3
nor 4, `*` with something that is neither a group element nor a tensor, two elements of
different groups, a non-positive scale in an RxSO3 or Sim3, data of the wrong width.
"""

from __future__ import annotations

import math

import torch

from . import _autograd


def _shape(shape) -> tuple[int, ...]:
    """A batch shape given as ints, or as one tuple, list or torch.Size (LieTorch's forms)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = shape[0]
    return tuple(int(n) for n in shape)


class LieGroup:
    """A batch of elements of one group over a tensor `data (..., embedded_dim)` in
    LieTorch's layout (see the subclasses); `data` is the very tensor given."""

    group_name: str
    group_id: int
    manifold_dim: int
    embedded_dim: int
    id_elem: torch.Tensor
    # Where a scale is stored (RxSO3, Sim3): its index in the data.
    scale_index: int | None = None

    def __init__(self, data):
        if isinstance(data, LieGroup):
            data = self._converted(data)
        self.data = self._checked(data)

    @classmethod
    def _wrap(cls, data: torch.Tensor):
        """An element around data that an op made (no checks)."""
        element = object.__new__(cls)
        element.data = data
        return element

    def _converted(self, other: LieGroup) -> torch.Tensor:
        if type(other) is type(self):
            return other.data
        raise TypeError(
            f"xform.lietorch.{type(self).__name__}: cannot convert an {type(other).__name__} "
            f"(the conversions are SE3 -> SO3, Sim3 -> RxSO3, SO3 -> SE3, SO3 and SE3 -> Sim3)"
        )

    @classmethod
    def _checked(cls, data) -> torch.Tensor:
        if not isinstance(data, torch.Tensor):
            raise TypeError(
                f"xform.lietorch.{cls.__name__}: data must be a torch.Tensor, got "
                f"{type(data).__module__}.{type(data).__qualname__}"
            )
        if data.dim() == 0 or data.shape[-1] != cls.embedded_dim:
            raise ValueError(
                f"xform.lietorch.{cls.__name__}: data has shape {tuple(data.shape)}; expected "
                f"(..., {cls.embedded_dim}) ({cls._layout})"
            )
        cls._check_scales(data)
        return data

    @classmethod
    def _check_scales(cls, data: torch.Tensor) -> None:
        if cls.scale_index is None or data.numel() == 0:
            return
        scales = data[..., cls.scale_index].detach()
        if bool((scales <= 0).any()):
            raise ValueError(
                f"xform.lietorch.{cls.__name__}: a scale (data[..., {cls.scale_index}]) is not "
                f"positive (smallest {float(scales.min()):.6g}); {cls.__name__} needs s > 0"
            )

    def __repr__(self) -> str:
        return f"{self.group_name}: size={self.shape}, device={self.device}, dtype={self.dtype}"

    # --- the data ---------------------------------------------------------------------------

    @property
    def shape(self) -> torch.Size:
        """The batch shape: `data.shape[:-1]`."""
        return self.data.shape[:-1]

    @property
    def device(self) -> torch.device:
        """The device of `data`."""
        return self.data.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of `data`."""
        return self.data.dtype

    @property
    def tangent_shape(self) -> torch.Size:
        """The shape of a tangent of this batch: `shape + (manifold_dim,)`."""
        return self.data.shape[:-1] + (self.manifold_dim,)

    def vec(self) -> torch.Tensor:
        """The data, whose gradient becomes the tangent gradient (LieTorch's ToVec)."""
        return _autograd.ToVec.apply(self.group_name, self.data)

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def Identity(cls, *batch_shape, **kwargs):
        """The identity of batch shape `batch_shape` (`device=`, `dtype=` as LieTorch's)."""
        shape = _shape(batch_shape)
        data = cls.id_elem.to(
            device=kwargs.get("device"), dtype=kwargs.get("dtype", cls.id_elem.dtype)
        )
        return cls._wrap(data.repeat(math.prod(shape), 1).view(*shape, cls.embedded_dim))

    @classmethod
    def IdentityLike(cls, G: LieGroup):
        """The identity with `G`'s batch shape, device and dtype."""
        return cls.Identity(G.shape, device=G.data.device, dtype=G.data.dtype)

    @classmethod
    def InitFromVec(cls, data: torch.Tensor):
        """An element from a vector: a tangent gradient becomes a data gradient through the
        pseudo-inverse of the projector (LieTorch's FromVec)."""
        return cls(_autograd.FromVec.apply(cls.group_name, cls._checked(data)))

    @classmethod
    def Random(cls, *batch_shape, sigma: float = 1.0, **kwargs):
        """exp(sigma xi) for xi standard normal in the tangent space (`device=`, `dtype=`,
        `generator=` go to torch.randn)."""
        xi = torch.randn(_shape(batch_shape) + (cls.manifold_dim,), **kwargs)
        return cls.exp(sigma * xi)

    @classmethod
    def exp(cls, x: torch.Tensor):
        """The exponential of tangents `x (..., manifold_dim)`."""
        cls._check_tangent(x, "exp")
        return cls._wrap(_autograd.Unary.apply(cls.group_name, "exp", x))

    @classmethod
    def _check_tangent(cls, a, method: str) -> None:
        if not isinstance(a, torch.Tensor) or a.dim() == 0 or a.shape[-1] != cls.manifold_dim:
            got = tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
            raise ValueError(
                f"xform.lietorch.{cls.__name__}.{method}: the tangent has shape {got}; "
                f"expected a torch.Tensor (..., {cls.manifold_dim})"
            )

    # --- methods ------------------------------------------------------------------------------

    def log(self) -> torch.Tensor:
        """The tangent `(..., manifold_dim)` whose `exp` is this element (LieTorch's order)."""
        return _autograd.Unary.apply(self.group_name, "log", self.data)

    def inv(self):
        """The inverse element."""
        return self._wrap(_autograd.Unary.apply(self.group_name, "inv", self.data))

    def _same_group(self, other, method: str) -> None:
        if type(other) is not type(self):
            raise TypeError(
                f"xform.lietorch.{type(self).__name__}.{method}: the other element is an "
                f"{type(other).__name__}; expected an {type(self).__name__} (convert one: "
                f"{type(self).__name__}(other))"
            )

    def mul(self, other: LieGroup):
        """The product `self * other` (`other` first on points), batch shapes broadcast."""
        self._same_group(other, "mul")
        return self._wrap(_autograd.Binary.apply(self.group_name, "mul", self.data, other.data))

    def retr(self, a: torch.Tensor):
        """exp(a) * X (a left retraction)."""
        return self.exp(a).mul(self)

    def adj(self, a: torch.Tensor) -> torch.Tensor:
        """Ad(X) a."""
        self._check_tangent(a, "adj")
        return _autograd.Binary.apply(self.group_name, "adj", self.data, a)

    def adjT(self, a: torch.Tensor) -> torch.Tensor:
        """Ad(X)^T a."""
        self._check_tangent(a, "adjT")
        return _autograd.Binary.apply(self.group_name, "adjT", self.data, a)

    def Jinv(self, a: torch.Tensor) -> torch.Tensor:
        """J_l(log X)^-1 a."""
        self._check_tangent(a, "Jinv")
        return _autograd.Jinv.apply(self.group_name, self.data, a)

    def act(self, p: torch.Tensor) -> torch.Tensor:
        """X p for points `(..., 3)`, or homogeneous points `(..., 4)` (`(X p, w)`)."""
        if not isinstance(p, torch.Tensor):
            raise TypeError(
                f"xform.lietorch.{type(self).__name__}.act: points must be a torch.Tensor, got "
                f"{type(p).__name__}"
            )
        if p.dim() > 0 and p.shape[-1] == 3:
            return _autograd.Binary.apply(self.group_name, "act", self.data, p)
        if p.dim() > 0 and p.shape[-1] == 4:
            return _autograd.Binary.apply(self.group_name, "act4", self.data, p)
        raise ValueError(
            f"xform.lietorch.{type(self).__name__}.act: points have shape {tuple(p.shape)}; "
            "expected (..., 3), or (..., 4) homogeneous"
        )

    def matrix(self) -> torch.Tensor:
        """The 4 x 4 matrix of each element (LieTorch's: X applied to the identity's
        columns, so its gradient is act4's)."""
        identity = torch.eye(4, dtype=self.dtype, device=self.device)
        identity = identity.view([1] * (self.data.dim() - 1) + [4, 4])
        return self._wrap(self.data[..., None, :]).act(identity).transpose(-1, -2)

    def translation(self) -> torch.Tensor:
        """`(t, 1)`: X applied to the homogeneous origin."""
        origin = torch.as_tensor([0.0, 0.0, 0.0, 1.0], dtype=self.dtype, device=self.device)
        return self.act(origin.view([1] * (self.data.dim() - 1) + [4]))

    def detach(self):
        """The element with its data detached from autograd's graph."""
        return self._wrap(self.data.detach())

    def view(self, *dims):
        """The element with its batch viewed as `dims` (`data.view(*dims, embedded_dim)`)."""
        return self._wrap(self.data.view(*_shape(dims), self.embedded_dim))

    def __mul__(self, other):
        if isinstance(other, LieGroup):
            return self.mul(other)
        if isinstance(other, torch.Tensor):
            return self.act(other)
        raise TypeError(
            f"xform.lietorch.{type(self).__name__} * {type(other).__name__}: expected an "
            f"{type(self).__name__} (composition) or a torch.Tensor of points"
        )

    def __getitem__(self, index):
        return self._wrap(self.data[index])

    def __setitem__(self, index, item) -> None:
        if isinstance(item, LieGroup):
            self._same_group(item, "__setitem__")
            item = item.data
        elif isinstance(item, torch.Tensor) and self.scale_index is not None:
            self._check_scales(torch.broadcast_to(item, self.data[index].shape))
        self.data[index] = item

    def to(self, *args, **kwargs):
        """The element with its data moved or cast as `torch.Tensor.to` does."""
        return self._wrap(self.data.to(*args, **kwargs))

    def cpu(self):
        """The element with its data on the CPU."""
        return self._wrap(self.data.cpu())

    def cuda(self):
        """The element with its data on the current CUDA device."""
        return self._wrap(self.data.cuda())

    def float(self):
        """The element in float32."""
        return self._wrap(self.data.float())

    def double(self):
        """The element in float64."""
        return self._wrap(self.data.double())

    def unbind(self, dim: int = 0):
        """The elements along batch axis `dim`, as a list."""
        return [self._wrap(x) for x in self.data.unbind(dim=dim)]


class SO3(LieGroup):
    """Rotations: data `[x, y, z, w]` (unit quaternion); tangent `phi (..., 3)`."""

    group_name, group_id, manifold_dim, embedded_dim = "SO3", 1, 3, 4
    id_elem = torch.as_tensor([0.0, 0.0, 0.0, 1.0])
    _layout = "[x, y, z, w]"

    def _converted(self, other):
        if isinstance(other, SE3):
            return other.data[..., 3:7]
        return super()._converted(other)


class RxSO3(LieGroup):
    """Rotations and scales: data `[x, y, z, w, s]`, `s > 0`; tangent `[phi, sigma] (..., 4)`,
    `s = e^sigma`."""

    group_name, group_id, manifold_dim, embedded_dim = "RxSO3", 2, 4, 5
    id_elem = torch.as_tensor([0.0, 0.0, 0.0, 1.0, 1.0])
    scale_index = 4
    _layout = "[x, y, z, w, s]"

    def _converted(self, other):
        if isinstance(other, Sim3):
            return other.data[..., 3:8]
        return super()._converted(other)


class SE3(LieGroup):
    """Rigid motions: data `[t, x, y, z, w]`; tangent `[tau, phi] (..., 6)`."""

    group_name, group_id, manifold_dim, embedded_dim = "SE3", 3, 6, 7
    id_elem = torch.as_tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    _layout = "[tx, ty, tz, x, y, z, w]"

    def _converted(self, other):
        if isinstance(other, SO3):
            return torch.cat([torch.zeros_like(other.data[..., :3]), other.data], -1)
        return super()._converted(other)

    def scale(self, s: torch.Tensor):
        """The translation times `s (...)` (LieTorch's SE3.scale)."""
        t, q = self.data.split([3, 4], -1)
        return SE3(torch.cat([t * s.unsqueeze(-1), q], dim=-1))


class Sim3(LieGroup):
    """Similarities: data `[t, x, y, z, w, s]`, `s > 0` (linear); tangent
    `[tau, phi, sigma] (..., 7)`, `s = e^sigma`."""

    group_name, group_id, manifold_dim, embedded_dim = "Sim3", 4, 7, 8
    id_elem = torch.as_tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    scale_index = 7
    _layout = "[tx, ty, tz, x, y, z, w, s]"

    def _converted(self, other):
        if isinstance(other, SO3):  # LieTorch's reads SO3.data off the class: an error
            zeros = torch.zeros_like(other.data[..., :3])
            return torch.cat([zeros, other.data, torch.ones_like(other.data[..., :1])], -1)
        if isinstance(other, SE3):
            return torch.cat([other.data, torch.ones_like(other.data[..., :1])], -1)
        return super()._converted(other)


class LieGroupParameter(torch.Tensor):
    """A group element to optimise with `torch.optim`: the tensor is a tangent `delta`
    (zeros at first) at a base element `X`, the value `exp(delta) * X`. Its gradient is the
    tangent gradient at that value (exact at any delta). `group` is that value, whichever
    optimiser moved it: SGD's `add_` moves the base itself, as LieTorch's (`X <- exp(alpha
    update + delta) * X`, `delta <- 0`); any other update (Adam, foreach or fused steps)
    moves `delta` in place."""

    from torch._C import _disabled_torch_function_impl

    __torch_function__ = _disabled_torch_function_impl

    def __new__(cls, group: LieGroup, requires_grad: bool = True):
        data = torch.zeros(group.tangent_shape, device=group.data.device, dtype=group.data.dtype)
        return torch.Tensor._make_subclass(cls, data, requires_grad)

    def __init__(self, group: LieGroup, requires_grad: bool = True):
        self.group = group

    @property
    def group(self) -> LieGroup:
        """The element this parameter holds, `exp(delta) * X`, outside autograd's graph
        (LieTorch's `P.group`; `retr()` is the same value, differentiable in delta)."""
        with torch.no_grad():
            return self._held_at.retr(self.as_subclass(torch.Tensor).detach())

    @group.setter
    def group(self, element: LieGroup) -> None:
        """Hold `element`: it becomes the base, and the tangent zero."""
        self._held_at = element.detach()
        with torch.no_grad():
            torch.Tensor.zero_(self)

    def retr(self):
        """The element this parameter holds: `exp(δ) * X` for its tangent δ (X itself for SGD)."""
        return self._held_at.retr(self)

    def log(self):
        """`log` of the element this parameter holds."""
        return self.retr().log()

    def inv(self):
        """`inv` of the element this parameter holds."""
        return self.retr().inv()

    def adj(self, a):
        """`adj` of the element this parameter holds."""
        return self.retr().adj(a)

    def __mul__(self, other):
        if isinstance(other, LieGroupParameter):
            return self.retr() * other.retr()
        return self.retr() * other

    def add_(self, update, alpha=1):
        with torch.no_grad():
            step = torch.Tensor.add(self.as_subclass(torch.Tensor), update, alpha=alpha)
            self.group = self._held_at.retr(step)
        return self

    def __getitem__(self, index):
        return self.retr().__getitem__(index)


def _same_class(groups, function: str):
    groups = list(groups)
    if not groups:
        raise ValueError(f"xform.lietorch.{function}: no elements")
    kinds = {type(g) for g in groups}
    if len(kinds) > 1 or not issubclass(next(iter(kinds)), LieGroup):
        names = sorted(k.__name__ for k in kinds)
        raise TypeError(f"xform.lietorch.{function}: elements of one group expected, got {names}")
    return groups


def cat(group_list, dim: int):
    """Concatenate elements of one group along batch dimension `dim`."""
    groups = _same_class(group_list, "cat")
    return groups[0]._wrap(torch.cat([x.data for x in groups], dim=dim))


def stack(group_list, dim: int):
    """Stack elements of one group along a new batch dimension `dim`."""
    groups = _same_class(group_list, "stack")
    return groups[0]._wrap(torch.stack([x.data for x in groups], dim=dim))
