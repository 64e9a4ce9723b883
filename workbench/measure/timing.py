"""Latency measurement with one protocol for every runner: warm-up, repeats, robust statistics.

Every label (the workbench build and each baseline) is timed by the same loop around a Python
call that runs one inference on inputs already placed on the device, so the per-call overhead
is the same for all and ratios are fair.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np


@dataclass
class Timing:
    """Summary of one label's latency samples, in milliseconds."""

    median_ms: float
    p90_ms: float
    mean_ms: float
    min_ms: float
    ci95_ms: tuple[float, float]
    repeats: int

    def as_dict(self) -> dict:
        return asdict(self)


def median_ci95(samples_ms: np.ndarray, seed: int = 0, resamples: int = 1000) -> tuple[float, float]:
    """95% bootstrap confidence interval of the median (no normality assumption about latency)."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(samples_ms, size=(resamples, samples_ms.size), replace=True)
    low, high = np.percentile(np.median(picks, axis=1), [2.5, 97.5])
    return float(low), float(high)


def summarize(samples_ms: np.ndarray) -> Timing:
    return Timing(
        median_ms=float(np.median(samples_ms)),
        p90_ms=float(np.percentile(samples_ms, 90)),
        mean_ms=float(samples_ms.mean()),
        min_ms=float(samples_ms.min()),
        ci95_ms=median_ci95(samples_ms),
        repeats=int(samples_ms.size),
    )


def sample_call(run_once: Callable[[], object], warmup: int, repeat: int,
                sync: Callable[[], None] = lambda: None) -> np.ndarray:
    """`repeat` latencies (ms) of `run_once` after `warmup` untimed calls; `sync` waits for async devices."""
    for _ in range(warmup):
        run_once()
    sync()
    samples = np.empty(repeat)
    for i in range(repeat):
        start = time.perf_counter()
        run_once()
        sync()
        samples[i] = (time.perf_counter() - start) * 1e3
    return samples


def time_call(run_once: Callable[[], object], warmup: int, repeat: int,
              sync: Callable[[], None] = lambda: None) -> Timing:
    """Time `run_once` `repeat` times after `warmup` untimed calls; `sync` waits for async devices."""
    return summarize(sample_call(run_once, warmup, repeat, sync))


class Sampled(Protocol):
    """What interleaved timing calls (runners.Runner is one): `repeat` latencies in ms after `warmup` calls."""

    def samples(self, warmup: int, repeat: int) -> np.ndarray: ...


SETTLE_S = 0.2  # before each label's turn: the thread pools of the label before it stop spinning and sleep


MIN_CAPPED_REPEAT = 3  # timed runs a label keeps under `round_seconds`, however slow


def _capped_samples(runner: Sampled, warmup: int, repeat: int, round_seconds: float | None) -> np.ndarray:
    """`repeat` samples, or with `round_seconds` about that many seconds' worth (at least MIN_CAPPED_REPEAT): the
    first few runs say how long one takes."""
    if round_seconds is None or repeat <= MIN_CAPPED_REPEAT:
        return runner.samples(warmup, repeat)
    first = runner.samples(warmup, MIN_CAPPED_REPEAT)
    wanted = min(repeat, max(MIN_CAPPED_REPEAT, int(round_seconds * 1e3 / float(np.median(first)))))
    return first if wanted == MIN_CAPPED_REPEAT else np.concatenate([first, runner.samples(0, wanted - len(first))])


def interleaved(runners: dict[str, Sampled], warmup: int, repeat: int, rounds: int,
                failures: dict[str, Exception] | None = None, round_seconds: float | None = None) -> dict[str, Timing]:
    """Each label timed in `rounds` rounds, every round timing every label once in turn (`repeat` runs after
    `warmup`, fewer where `round_seconds` caps a slow label's time): a load change on the machine during the
    measurement hits all labels alike, so their ratios stay fair. A label's figures are over all its samples. One
    round is the plain protocol: each label timed once, in order. With `failures`, a label whose call raises is
    left out of the later rounds and of the result, its exception kept there, and the others go on; without, the
    exception propagates."""
    samples: dict[str, list[np.ndarray]] = {label: [] for label in runners}
    for _ in range(rounds):
        for label, runner in runners.items():
            if failures is not None and label in failures:
                continue
            if rounds > 1:
                time.sleep(SETTLE_S)
            try:
                samples[label].append(_capped_samples(runner, warmup, repeat, round_seconds))
            except Exception as exc:  # any runtime's failure at run time: the label's, not the others'
                if failures is None:
                    raise
                failures[label] = exc
    return {label: summarize(np.concatenate(taken)) for label, taken in samples.items()
            if taken and label not in (failures or {})}


def interleaved_medians(runners: dict[str, Sampled], repeat: int, rounds: int) -> dict[str, float]:
    """Each label's median over `rounds` interleaved rounds of `repeat` runs (two warm-up runs each round)."""
    return {label: timing.median_ms for label, timing in interleaved(runners, 2, repeat, rounds).items()}
