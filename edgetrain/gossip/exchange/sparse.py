"""Partial gradients: what one message carries, the per-link residual that keeps what was not
sent, the bandwidth-budgeted top-k, and the checks a receiver runs (gossip.md B.5). Pure.

A payload is one of three kinds, all on the ordinary wire format (named tensors, no pickle):

- ``dense``: ``val`` float32 of length n;
- ``sparse``: ``idx`` int32, sorted, unique, inside [0, n), and ``val`` float32 of the same
  length (8 bytes an entry);
- ``slice``: ``val`` float32 for the contiguous entries from ``offset`` (Ako's partitions).

**The contribution threshold** (the paper gives no formula; the specification's proposal, ours):
a link with budget B bytes carries k = floor(B / 8) entries, the k largest by contribution
(|v_i| by default; Gaia-like ``relative``: |eta v_i| / (|w_i| + 1e-8)), so the threshold is the
k-th largest contribution and falls out of the link's bandwidth; when k >= n / 2 the dense
vector is the smaller message and goes instead. **Residuals**: what a link did not carry is
added to the next iteration's vector on that link (error feedback), so for every link the sum of
what was sent plus the residual equals the sum of the gradients (the float32 rounding of the
sent values stays in the residual too).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

Kind = Literal["dense", "sparse", "slice"]
ENTRY_BYTES = 8  # int32 index + float32 value
PROBE_EVERY = 50  # DLion's select_cost: every 50th iteration sparse regardless, to measure again
DENSE_BYTES = 4  # a float32 value


@dataclass(frozen=True)
class Payload:
    """Part of a flat vector of length ``n``, as it travels."""

    kind: Kind
    n: int
    values: np.ndarray  # float32
    indices: np.ndarray | None = None  # int32 (sparse)
    offset: int = 0  # first entry (slice)

    @property
    def entries(self) -> int:
        return int(self.values.size)

    @property
    def nbytes(self) -> int:
        extra = self.indices.nbytes if self.indices is not None else 0
        return int(self.values.nbytes) + int(extra)

    def tensors(self) -> dict[str, np.ndarray]:
        out = {"val": self.values}
        if self.indices is not None:
            out["idx"] = self.indices
        return out

    def meta(self) -> dict[str, object]:
        return {"kind": self.kind, "n": self.n, "offset": self.offset}

    def add_into(self, target: torch.Tensor, scale: float = 1.0) -> None:
        """``target += scale * payload`` (target: the dense flat vector)."""
        vals = read_only_view(np.asarray(self.values)).to(target.device, target.dtype)
        if scale != 1.0:
            vals = vals * scale
        if self.kind == "dense":
            target.add_(vals)
        elif self.kind == "slice":
            target[self.offset : self.offset + vals.numel()].add_(vals)
        else:
            assert self.indices is not None
            idx = torch.from_numpy(np.asarray(self.indices, dtype=np.int64)).to(target.device)
            target.index_add_(0, idx, vals)

    def dense(self) -> np.ndarray:
        """The payload as a dense float64 vector (tests and checks)."""
        out = torch.zeros(self.n, dtype=torch.float64)
        self.add_into(out)
        return out.numpy()


def read_only_view(a: np.ndarray) -> torch.Tensor:
    """A tensor over ``a`` without a copy, for reading only: a received message's values are
    read-only (the socket's buffer), which ``torch.from_numpy`` warns about once a process."""
    if a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


def entries_for(budget_bytes: float, n: int) -> int | None:
    """Entries a link's byte budget carries as a sparse message, or None when the dense vector
    (4 bytes an entry) is the smaller message: k >= n / 2. At least one entry."""
    k = int(budget_bytes // ENTRY_BYTES) if budget_bytes > 0 else 0
    if 2 * k >= n:
        return None
    return max(1, k)


def sparse_pays(n: int, k: int, bandwidth_bps: float, select_s: float) -> bool:
    """Whether a link should carry ``k`` of ``n`` entries as a sparse message rather than the
    dense vector (ours): the bytes it saves, (4n - 8k) at ``bandwidth_bps``, must take the link
    longer than choosing the k entries takes this worker (``select_s``, measured). On a slow
    host and a fast LAN the top-k selection costs more than it saves."""
    saved = DENSE_BYTES * n - ENTRY_BYTES * k
    if saved <= 0:
        return False
    if bandwidth_bps <= 0:
        return True
    return saved / bandwidth_bps > select_s


def top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of the ``k`` largest scores, sorted ascending (exactly k of them; among
    scores tied at the k-th largest, the lowest indices).

    On the CPU by a partition around the k-th largest score (linear time, no sort of the
    chosen entries: the mask's indices come out sorted), several times faster than
    ``torch.topk`` followed by a sort; elsewhere with ``torch.topk``."""
    n = scores.numel()
    k = min(k, n)
    if k <= 0:
        return torch.zeros(0, dtype=torch.int64, device=scores.device)
    if scores.device.type != "cpu":
        return torch.topk(scores, k, sorted=False).indices.sort().values
    return torch.from_numpy(top_k_numpy(scores.detach().reshape(-1).numpy(), k))


# Below this many entries, or when k is more than this share of them, a partition of the whole
# vector is as quick as narrowing it down first.
PREFILTER_MIN_N = 4096
PREFILTER_MAX_SHARE = 0.25
SAMPLE_ENTRIES = 2048  # the sample that places the candidates' bound
MARGIN_SIGMAS = 4.0  # how far the bound sits below the sample's estimate of the k-th largest
_SAMPLES: dict[int, np.ndarray] = {}  # the sample's positions, by vector length (fixed seed)


def top_k_numpy(s: np.ndarray, k: int) -> np.ndarray:
    """:func:`top_k` of a flat numpy array, as int64 indices.

    For a small share of a long vector, the k largest are found among candidates: every score
    at least a bound read off a sample (a little below where the k-th largest would lie).
    When at least k scores reach the bound, the k-th largest of them is the k-th largest of
    all (a bound above it would leave fewer than k scores at or over it), so the choice is
    exactly the full partition's, at two passes over the vector and a partition of little more
    than k scores instead of one of n; otherwise the full partition runs."""
    n = s.size
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    idx = _candidates(s, k)
    if idx is None:
        return _largest(s, k, None)
    return _largest(s[idx], k, idx)


def _largest(vals: np.ndarray, k: int, idx: np.ndarray | None) -> np.ndarray:
    """The positions (in ``idx``, None: in ``vals``) of the ``k`` largest of ``vals``, sorted;
    among values tied at the k-th largest the first ones."""
    m = vals.size
    threshold = np.partition(vals, m - k)[m - k]

    def where(mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(mask) if idx is None else idx[mask]

    chosen = where(vals >= threshold)
    if chosen.size > k:  # scores tied at the threshold: keep the lowest indices among them
        above = where(vals > threshold)
        ties = where(vals == threshold)[: k - above.size]
        chosen = np.sort(np.concatenate((above, ties)))
    return chosen.astype(np.int64, copy=False)


def _candidates(s: np.ndarray, k: int) -> np.ndarray | None:
    """The indices of every score at least a bound read off a sample of the scores (where
    about k of them, and a margin of four standard deviations of the estimate, would lie), if
    at least ``k`` reach it; None: the whole vector is the candidates. The sample's positions
    are drawn once per length with a fixed seed (a stride could follow a layer's pattern); they
    decide only how fast the choice is, never what is chosen."""
    n = s.size
    if n < PREFILTER_MIN_N or k > PREFILTER_MAX_SHARE * n:
        return None
    at = _SAMPLES.get(n)
    if at is None:
        at = _SAMPLES[n] = np.sort(np.random.default_rng(n).choice(n, SAMPLE_ENTRIES, False))
    sample = s[at]
    m = sample.size
    p = k / n
    want = k + MARGIN_SIGMAS * n * math.sqrt(p * (1.0 - p) / m) + 16.0  # scores above the bound
    j = max(0, m - 1 - math.ceil(m * want / n))
    bound = np.partition(sample, j)[j]
    idx = np.flatnonzero(s >= bound)
    return idx if idx.size >= k else None


def to_float32(v: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
    """``v`` as float32 for the wire, and the rounding it lost (in ``v``'s dtype)."""
    v32 = v.detach().to(torch.float32)
    lost = v - v32.to(v.dtype)
    return v32.cpu().numpy().copy(), lost


class Residual:
    """One link's unsent remainder (error feedback): ``take`` adds a gradient and returns what
    the link carries now; the rest waits for the next iteration."""

    def __init__(self, n: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> None:
        self.r = torch.zeros(n, dtype=dtype, device=device)
        self.empty = True  # known to hold nothing: a dense take of g alone is g

    @property
    def exact(self) -> bool:
        """A float32 vector on the CPU: it travels as it is, nothing lost to rounding."""
        return self.r.dtype == torch.float32 and self.r.device.type == "cpu"

    @property
    def n(self) -> int:
        return int(self.r.numel())

    def add(self, g: torch.Tensor) -> None:
        self.r.add_(g)
        self.empty = False

    def take(
        self,
        g: torch.Tensor | None,
        k: int | None,
        score: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> Payload:
        """Add ``g`` (None: nothing new) and send: dense (``k`` None) or the ``k`` entries
        with the largest contribution ``score(v)`` (default |v|) of the vector v after the
        addition."""
        if g is not None:
            self.r.add_(g)
        v = self.r
        exact = self.exact
        self.empty = False
        if k is None:
            if exact:  # the vector itself travels (no rounding lost); a fresh one stays
                self.r = torch.zeros_like(v)
                self.empty = True
                return Payload("dense", self.n, v.numpy())
            vals, lost = to_float32(v)
            self.r = lost
            return Payload("dense", self.n, vals)
        if exact:  # numpy's indexing is several times faster than torch's on the CPU
            scores = np.abs(v.numpy()) if score is None else score(v).detach().numpy()
            chosen = top_k_numpy(scores, k)
            flat = v.numpy()
            vals = flat[chosen]
            flat[chosen] = 0.0
            return Payload("sparse", self.n, vals, chosen.astype(np.int32))
        idx = top_k(v.abs() if score is None else score(v), k)
        vals, lost = to_float32(v[idx])
        v[idx] = lost
        return Payload("sparse", self.n, vals, idx.to(torch.int32).cpu().numpy().copy())


def validate(
    kind: object, n: int, values: np.ndarray | None, indices: np.ndarray | None, offset: object
) -> str | None:
    """Why a received payload cannot be used (a short counter key), or None if it can."""
    if values is None or values.dtype != np.float32 or values.ndim != 1:
        return "bad_payload_values"
    if not np.isfinite(values).all():
        return "non_finite"
    if kind == "dense":
        return None if values.size == n and indices is None else "bad_payload_shape"
    if kind == "slice":
        if indices is not None or not isinstance(offset, int) or isinstance(offset, bool):
            return "bad_payload_shape"
        return None if offset >= 0 and offset + values.size <= n else "bad_payload_range"
    if kind != "sparse":
        return "bad_payload_kind"
    if indices is None or indices.dtype != np.int32 or indices.ndim != 1:
        return "bad_sparse_indices"
    if indices.size != values.size or indices.size > n:
        return "bad_payload_shape"
    if indices.size == 0:
        return None
    if indices[0] < 0 or indices[-1] >= n:
        return "bad_sparse_range"
    if indices.size > 1 and not bool((indices[1:] > indices[:-1]).all()):
        return "bad_sparse_order"  # unsorted or repeated
    return None


def payload_from(meta: dict[str, object], tensors: dict[str, np.ndarray], n: int) -> Payload | str:
    """A received message's payload for a vector of length ``n``, or why it is refused."""
    if set(tensors) - {"val", "idx"}:
        return "bad_payload_tensors"
    kind, offset = meta.get("kind"), meta.get("offset", 0)
    if meta.get("n") != n:
        return "bad_payload_length"
    values, indices = tensors.get("val"), tensors.get("idx")
    reason = validate(kind, n, values, indices, offset)
    if reason is not None:
        return reason
    assert values is not None and isinstance(offset, int)
    k: Kind = "dense" if kind == "dense" else "slice" if kind == "slice" else "sparse"
    return Payload(k, n, values, indices, offset if k == "slice" else 0)
