"""INT8 calibration: calibration inputs, activation statistics, clipping thresholds, accuracy figures.

The `quantize` pass (precision.py) makes the activations it will quantize observable (extra outputs of
`main`), compiles that float module for the host CPU (llvm) and runs it on the calibration samples; this
module turns the observed tensors into one clipping threshold per activation:

- `minmax`: max |x| over all samples;
- `percentile`: the given percentile of |x| (e.g. 99.99 clips the rarest 0.01 %);
- `entropy`: TensorRT's KL-divergence search — histogram |x| into 2048 bins, and for every candidate
  threshold (bin 128..2048) compare the clipped distribution P with its 128-level quantized version Q;
  the threshold with the smallest KL(P||Q) wins.

Symmetric quantization (the default) is int8 with zero point 0: scale = threshold / 127. Asymmetric
quantization (ONNX Runtime's default for activations) is uint8 over [lo, hi] with a zero point:
scale = (hi - lo) / 255, the observed range clipped to the threshold on each side (percentile: the
signed percentiles) and widened to hold 0. A non-negative activation (after a ReLU) then spends all 256
levels on [0, hi] instead of 128, and HardSwish's small negative tail costs a few levels, not half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.errors import UserError
from workbench.models.accuracy import compare
from workbench.models.inputs import DEFAULT_RANGES

METHODS = ("minmax", "percentile", "entropy")
INT8_MAX = 127
UINT8_LEVELS = 255  # uint8 steps between the range's ends
ENTROPY_BINS = 2048
ENTROPY_LEVELS = 128
# |x| values kept per activation over all samples for percentile/entropy (a seeded subsample beyond it)
MAX_KEPT_VALUES = 1 << 21


# ---------------------------------------------------------------- calibration inputs

@dataclass(frozen=True)
class InputSig:
    """A graph input of `main`: name, static shape, dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


def random_inputs(sigs: list[InputSig], samples: int, seed: int) -> list[dict[str, np.ndarray]]:
    """`samples` seeded random input sets, drawn like the workbench's default inputs (floats uniform [0, 1))."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(samples):
        arrays = {}
        for sig in sigs:
            dtype = np.dtype(sig.dtype)
            low, high = DEFAULT_RANGES.get(dtype.kind, (0, 1))
            if dtype.kind == "f":
                arrays[sig.name] = rng.uniform(low, high, size=sig.shape).astype(dtype)
            else:
                arrays[sig.name] = rng.integers(int(low), int(high), size=sig.shape).astype(dtype)
        out.append(arrays)
    return out


def _check(array: np.ndarray, sig: InputSig, path: Path, what: str) -> np.ndarray:
    if tuple(array.shape) != sig.shape:
        raise UserError(f"quantize.files: {str(path)!r}{what} has shape {list(array.shape)}, "
                        f"but model input {sig.name!r} has shape {list(sig.shape)}")
    return array.astype(sig.dtype, copy=False)


def file_inputs(sigs: list[InputSig], files: list[Path]) -> list[dict[str, np.ndarray]]:
    """One input set per file: a .npy array (single-input models) or a .npz holding every input by name."""
    out = []
    for path in files:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UserError(f"quantize.files: cannot read {str(path)!r} as .npy/.npz ({exc})") from exc
        if isinstance(loaded, np.ndarray):
            if len(sigs) != 1:
                raise UserError(f"quantize.files: {str(path)!r} is a single .npy array but the model has "
                                f"{len(sigs)} inputs ({', '.join(s.name for s in sigs)}); use .npz with input names")
            out.append({sigs[0].name: _check(loaded, sigs[0], path, "")})
            continue
        with loaded:
            missing = [s.name for s in sigs if s.name not in loaded.files]
            if missing:
                raise UserError(f"quantize.files: {str(path)!r} lacks input(s) {', '.join(missing)} "
                                f"(it holds: {', '.join(loaded.files) or 'nothing'})")
            out.append({s.name: _check(loaded[s.name], s, path, f"[{s.name!r}]") for s in sigs})
    return out


# ---------------------------------------------------------------- statistics and thresholds

@dataclass
class ActivationStats:
    """Running statistics of one observed activation: its min, max, max |x| and a bounded sample of x."""

    amax: float = 0.0
    lo: float = 0.0
    hi: float = 0.0
    chunks: list[np.ndarray] = field(default_factory=list)

    def add(self, array: np.ndarray, keep: int, rng: np.random.Generator) -> None:
        values = np.asarray(array, dtype=np.float32).ravel()
        if values.size == 0:
            return
        self.lo, self.hi = min(self.lo, float(values.min())), max(self.hi, float(values.max()))
        self.amax = max(-self.lo, self.hi)
        if values.size > keep:
            values = rng.choice(values, size=keep, replace=False)
        self.chunks.append(values)

    def signed_values(self) -> np.ndarray:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.float32)

    def values(self) -> np.ndarray:
        """The sample of |x| the thresholds are computed on."""
        return np.abs(self.signed_values())


@dataclass(frozen=True)
class ActivationQuant:
    """How one activation is quantized: q = round(x / scale) + zero_point, in `dtype`."""

    scale: float
    zero_point: int = 0
    dtype: str = "int8"


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Move `eps` of mass onto empty bins so that KL(P||Q) stays finite (MXNet/TVM's smoothing)."""
    zeros = p == 0
    n_zeros, n_nonzeros = int(zeros.sum()), int(p.size - zeros.sum())
    if n_nonzeros == 0:
        return p
    eps1 = eps * n_zeros / n_nonzeros
    if eps1 >= 1.0:
        return p
    return p + eps * zeros - eps1 * ~zeros


def entropy_threshold(abs_values: np.ndarray, bins: int = ENTROPY_BINS, levels: int = ENTROPY_LEVELS,
                      amax: float | None = None) -> float:
    """TensorRT-style KL-divergence threshold over a histogram of |x| (`bins` bins, `levels` int8 levels)."""
    abs_values = np.asarray(abs_values, dtype=np.float64)
    amax = float(abs_values.max(initial=0.0)) if amax is None else float(amax)
    if amax <= 0.0:
        return 0.0
    hist, edges = np.histogram(abs_values, bins=bins, range=(0.0, amax))
    hist = hist.astype(np.float64)
    # ReLU outputs put a spike of exact zeros in bin 0 that would dominate the search; like NVIDIA's
    # pytorch-quantization, flatten it to its neighbour's height
    if bins > 1:
        hist[0] = hist[1]
    width = edges[1] - edges[0]
    best_kl, best_i = np.inf, bins
    for i in range(levels, bins + 1):
        sliced = hist[:i]
        p = sliced.copy()
        p[-1] += hist[i:].sum()  # what the threshold clips lands in the last bin
        nonzero = sliced != 0
        # merge the i bins into `levels` groups, spread each group's mass over its non-empty bins
        starts = (np.arange(levels) * i) // levels
        sums = np.add.reduceat(sliced, starts)
        counts = np.add.reduceat(nonzero.astype(np.float64), starts)
        avg = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
        q = np.repeat(avg, np.diff(np.append(starts, i))) * nonzero
        if p.sum() == 0 or q.sum() == 0:
            continue
        p_s, q_s = _smooth(p / p.sum()), _smooth(q / q.sum())
        mask = p_s > 0
        if np.any(q_s[mask] <= 0):
            continue
        kl = float(np.sum(p_s[mask] * np.log(p_s[mask] / q_s[mask])))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(min((best_i + 0.5) * width, amax))


def threshold(stats: ActivationStats, method: str, percentile: float = 99.99) -> float:
    """The clipping threshold (>= 0) for one activation under the calibration `method`."""
    if method == "minmax":
        return stats.amax
    values = stats.values()
    if values.size == 0:
        return 0.0
    if method == "percentile":
        return float(min(np.percentile(values, percentile), stats.amax))
    if method == "entropy":
        return entropy_threshold(values, amax=stats.amax)
    raise ValueError(f"unknown calibration method {method!r} (expected one of {', '.join(METHODS)})")


def scale_of(threshold_value: float) -> float:
    """Symmetric int8 scale for a threshold; an all-zero activation gets scale 1 (it quantizes to 0 anyway)."""
    return threshold_value / INT8_MAX if threshold_value > 0 else 1.0


def activation_quant(stats: ActivationStats, method: str, percentile: float = 99.99,
                     asymmetric: bool = False) -> ActivationQuant:
    """Symmetric int8 (zero point 0) or asymmetric uint8 parameters for one activation (module docstring)."""
    if not asymmetric:
        return ActivationQuant(scale_of(threshold(stats, method, percentile)))
    if method == "percentile" and stats.chunks:
        signed = stats.signed_values()
        lo, hi = float(np.percentile(signed, 100 - percentile)), float(np.percentile(signed, percentile))
    else:
        limit = threshold(stats, method, percentile)
        lo, hi = max(stats.lo, -limit), min(stats.hi, limit)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo <= 0:
        return ActivationQuant(1.0, 0, "uint8")
    scale = (hi - lo) / UINT8_LEVELS
    return ActivationQuant(scale, int(np.clip(round(-lo / scale), 0, UINT8_LEVELS)), "uint8")


def collect(run: "callable", inputs: list[dict[str, np.ndarray]], observed: int, n_outputs: int,
            seed: int = 0) -> list[ActivationStats]:
    """Run `run(arrays) -> list[np.ndarray]` (original outputs then `observed` activations) on every sample."""
    rng = np.random.default_rng(seed)
    stats = [ActivationStats() for _ in range(observed)]
    keep = max(1, MAX_KEPT_VALUES // max(1, len(inputs)))
    for arrays in inputs:
        outputs = run(arrays)
        for stat, array in zip(stats, outputs[n_outputs:n_outputs + observed]):
            stat.add(array, keep, rng)
    return stats


# ---------------------------------------------------------------- accuracy

def quantization_error(float_outputs: list[np.ndarray], quant_outputs: list[np.ndarray]) -> dict:
    """Error of the quantized model's outputs vs the float model's: max_abs_err, cosine, top1_agreement."""
    figures = compare(list(quant_outputs), list(float_outputs), rtol=0.0, atol=0.0)
    return {k: figures[k] for k in ("max_abs_err", "cosine", "top1_agreement")}
