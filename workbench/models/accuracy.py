"""Compare a runner's outputs with the reference's: errors, cosine similarity, top-1 agreement."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.config.pipeline_spec import PassSpec

# bf16's tolerance against an fp32 reference. A bf16 operand keeps 8 significant bits (a relative rounding error up
# to 2^-9), so element-wise fp32 tolerances fail on values near zero whatever the model; instead each output must
# point the same way (cosine) and its largest error stay a small share of its largest magnitude. OpenVINO's own bf16
# and the workbench's `bf16` pass meet it on every corpus model (docs/precision.md).
BF16_MIN_COSINE = 0.999
BF16_MAX_ERROR_SHARE = 0.05
BF16_RULE = (f"bf16 tolerance: cosine >= {BF16_MIN_COSINE} and max error <= {BF16_MAX_ERROR_SHARE:.0%} of max |ref|, "
             "per output")


def runs_bf16(label: str, pipeline: Sequence[PassSpec]) -> bool:
    """Whether `label` computes in bf16 (OpenVINO's bf16 label; the workbench build of a pipeline with the `bf16`
    pass), so its outputs are held to bf16's tolerance (BF16_RULE), not the experiment's fp32 one."""
    if label == WORKBENCH_LABEL:
        return any(step.name == "bf16" for step in pipeline)
    return label == "openvino_bf16"


def compare(outputs: list[np.ndarray], reference: list[np.ndarray], rtol: float, atol: float,
            bf16: bool = False) -> dict:
    """Error figures over all outputs; `ok` is numpy's allclose rule (|a-b| <= atol + rtol*|ref|) everywhere, or
    with `bf16` the bf16 rule (BF16_RULE) for every output.

    `max_rel_err` is taken where |ref| > atol, so near-zero reference values do not blow it up.
    """
    if len(outputs) != len(reference):
        return {"ok": False, "max_abs_err": None, "max_rel_err": None, "cosine": None,
                "top1_agreement": None, "note": f"{len(outputs)} outputs vs {len(reference)} in the reference"}
    max_abs = max_rel = 0.0
    ok = True
    cosines = []
    for out, ref in zip(outputs, reference):
        if out.shape != ref.shape:
            return {"ok": False, "max_abs_err": None, "max_rel_err": None, "cosine": None,
                    "top1_agreement": None, "note": f"output shape {list(out.shape)} vs reference {list(ref.shape)}"}
        a, b = out.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
        diff = np.abs(a - b)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        significant = np.abs(b) > atol
        if significant.any():
            max_rel = max(max_rel, float((diff[significant] / np.abs(b[significant])).max()))
        norms = np.linalg.norm(a) * np.linalg.norm(b)
        cosines.append(float(a @ b / norms) if norms > 0 else float(np.array_equal(a, b)))
        if bf16:
            ok = ok and cosines[-1] >= BF16_MIN_COSINE and bool(
                diff.max(initial=0.0) <= BF16_MAX_ERROR_SHARE * np.abs(b).max(initial=0.0))
        else:
            ok = ok and bool(np.all(diff <= atol + rtol * np.abs(b)))
    first, first_ref = outputs[0], reference[0]
    top1 = top1_agreement(first, first_ref) if first_ref.ndim == 2 and first_ref.shape[1] > 1 else None
    return {"ok": ok, "max_abs_err": max_abs, "max_rel_err": max_rel, "cosine": min(cosines, default=1.0),
            "top1_agreement": top1, "note": BF16_RULE if bf16 else None}


def top1_agreement(logits: np.ndarray, reference: np.ndarray) -> float:
    """Share of rows whose arg-max class matches the reference's (for classifier outputs [N, classes])."""
    return float(np.mean(logits.reshape(len(logits), -1).argmax(1) == reference.reshape(len(reference), -1).argmax(1)))
