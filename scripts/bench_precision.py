"""Benchmark: what precision buys on this CPU — INT8 and FP16 workbench builds vs fp32 and ONNX Runtime, one run.

For each model every variant is built (llvm, this host) and timed by the same loop on the same inputs:

- `fp32 workbench`  fold_constant,fold_batchnorm,fuse,dce
- `int8 workbench`  the model's int8 config (configs/<model>_int8.yaml: NHWC, quantize(execute=int8), integer
                    kernels; on a VNNI CPU the convs' VNNI kernel, noted per row), once with symmetric int8
                    activations and once with asymmetric uint8 ones (`activations`)
- `fp16 workbench`  fold_constant,fp16,fuse,dce (rapidocr models)
- `ort_int8`        ONNX Runtime's static QDQ quantization on the same calibration inputs (workbench.measure.ort_quant)
- `ort_all`         ONNX Runtime fp32, all graph optimizations; `ort_none` (no optimizations) is the accuracy reference

Ratios are fp32-workbench median / variant median and ort_all median / variant median (> 1: the variant is
faster). Accuracy is against ort_none on the run's input (cosine, max abs error) and, for the classifier, top-1
agreement over the calibration inputs. The rapidocr models run and calibrate on synthetic text pages (see
`text_image`), the convnet on the workbench's seeded uniform inputs. Prints a Markdown table (the README's precision table). Usage:

    python scripts/bench_precision.py [--repeat 10] [--models convnet_small,rapidocr_cls,rapidocr_det,rapidocr_rec]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console
from tvm.target import codegen

from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment, TargetConfig, load_experiment
from workbench.config.pipeline_spec import PassSpec, parse_text, to_text
from workbench.kernels.packed_conv import vnni_target
from workbench.measure.factory import Bench, runner_for
from workbench.measure.ort_quant import calibration_samples, ort_int8_model
from workbench.measure.timing import interleaved
from workbench.models.accuracy import compare
from workbench.record.markdown import markdown_table
from workbench.record.results_page import Machine, write_results_page
from workbench.runtime.threads import cpu_threads
from workbench.stages import build, optimize, prepare

ROOT = Path(__file__).resolve().parent.parent
FP32 = "fold_constant,fold_batchnorm,fuse,dce"
FP16 = "fold_constant,fp16,fuse,dce"
MODELS = {  # model -> (config, variants beyond fp32 and the ORT baselines)
    "convnet_small": ("configs/convnet_small_int8.yaml", ("int8",)),
    "rapidocr_cls": ("configs/rapidocr_cls_int8.yaml", ("int8", "fp16")),
    "rapidocr_det": ("configs/rapidocr_det_int8.yaml", ("int8", "fp16")),
    "rapidocr_rec": ("configs/rapidocr_rec.yaml", ("fp16",)),
}
TOP1_MODELS = {"rapidocr_cls"}  # classifiers: top-1 agreement over the calibration inputs is meaningful
TEXT_MODELS = {"rapidocr_cls", "rapidocr_det", "rapidocr_rec"}  # run and calibrated on synthetic text, not noise
CALIBRATION_SAMPLES = 8


def text_image(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Synthetic text: lines of dark glyph strokes on white, normalized as rapidocr feeds its models
    ((x / 255 - 0.5) / 0.5: white 1, ink -1). On uniform noise det's map is empty (max 7e-5) and cls is a coin
    toss (0.51), so error figures would compare zeros; on these det marks 3-5 % of the pixels as text and cls
    is confident (0.84-0.999, every page in the same class).
    Odd seeds are turned 180° (cls's second class)."""
    rng = np.random.default_rng(seed)
    h, w = shape[-2:]
    page = np.ones((h, w), np.float32)
    for _ in range(1 if h < 100 else int(rng.integers(6, 12))):
        size = int(rng.integers(max(8, min(14, h // 3)), min(32, int(h * 0.7)) + 1))
        y, x = int(rng.integers(2, h - size - 1)), int(rng.integers(2, max(3, w // 4)))
        for c in range(int(rng.integers(5, 20))):
            left = x + c * int(size * 0.7)
            if left + size > w:
                break
            stroke = max(2, size // 7)
            for _ in range(int(rng.integers(2, 4))):
                if rng.random() < 0.5:  # a vertical stroke
                    at = left + int(rng.integers(0, size // 2))
                    page[y:y + size, at:at + stroke] = -1
                else:
                    at = y + int(rng.integers(0, size - 3))
                    page[at:at + stroke, left:left + size // 2] = -1
    page = page[::-1, ::-1] if seed % 2 else page
    return np.ascontiguousarray(np.broadcast_to(page, shape), dtype=np.float32)


def _on_text(experiment: Experiment, inputs: dict[str, np.ndarray], out_dir: Path) -> tuple[Experiment, dict]:
    """The experiment calibrating on synthetic text pages (.npy files under `out_dir`), and a text input to run."""
    (name, array), = inputs.items()
    files = []
    for i in range(CALIBRATION_SAMPLES):
        files.append(out_dir / "calibration" / f"text{i}.npy")
        files[-1].parent.mkdir(parents=True, exist_ok=True)
        np.save(files[-1], text_image(array.shape, i))
    pipeline = [PassSpec(name=s.name, params={**s.params, "files": [str(f) for f in files]}) if s.name == "quantize"
                else s for s in experiment.pipeline]
    return experiment.model_copy(update={"pipeline": pipeline}), {name: text_image(array.shape, 1001)}


def _with_activations(pipeline: list[PassSpec], kind: str) -> list[PassSpec]:
    """The pipeline with its quantize step's activations set to `kind` (symmetric int8 / asymmetric uint8)."""
    return [PassSpec(name=s.name, params={**s.params, "activations": kind}) if s.name == "quantize" else s
            for s in pipeline]


def _int8_note(records, target) -> str:
    """For an int8 build: how many of its int8 convs and matmuls run the VNNI kernel (vpdpbusd), or why none does."""
    int8 = next((r.analysis["int8"] for r in records if "int8" in r.analysis), None)
    if int8 is None:
        return ""
    if not vnni_target(target):
        return "this CPU has no VNNI: integer SIMD without dot products"
    return f"{int8['vnni']} of {sum(int8['lowered'].values())} int8 convs/matmuls on the VNNI kernel (vpdpbusd)"


def _top1(runner_for, samples: list[dict[str, np.ndarray]], reference) -> float:
    """Share of calibration inputs whose arg-max class equals the reference's."""
    hits = [int(np.argmax(runner_for(s).infer()[0]) == np.argmax(reference(s).infer()[0])) for s in samples]
    return sum(hits) / len(hits)


def bench_model(name: str, repeat: int, console: Console) -> list[dict]:
    config, extra = MODELS[name]
    experiment: Experiment = load_experiment(ROOT / config)
    prepared = prepare(experiment, ROOT, make_target(TargetConfig()))  # this CPU, as `workbench run` builds for it
    model, inputs, target = prepared.canonical, prepared.inputs, prepared.target
    out_dir = ROOT / "runs" / "bench_precision" / name
    if name in TEXT_MODELS:
        experiment, inputs = _on_text(experiment, inputs, out_dir)
    int8 = {f"int8 workbench ({kind})": to_text(_with_activations(experiment.pipeline, kind))
            for kind in ("symmetric", "asymmetric")} if "int8" in extra else {}
    pipelines = {"fp32 workbench": FP32, **int8, **({"fp16 workbench": FP16} if "fp16" in extra else {})}
    samples = calibration_samples(experiment, model)
    bench = Bench(model, inputs, target, out_dir)
    onnx_models = {"ort_all": model}
    builds, runners, notes = {}, {}, {}
    for label, pipeline in pipelines.items():
        with console.status(f"{name}: building {label}"):
            optimized = optimize(prepared, parse_text(pipeline), stats=False)
            builds[label] = build(optimized, target)
        runners[label] = runner_for(label, bench, builds[label])
        notes[label] = _int8_note(optimized.records, target)
    if "int8" in extra:
        with console.status(f"{name}: ONNX Runtime static quantization"):
            onnx_models["ort_int8"] = ort_int8_model(experiment, model, out_dir)
        runners["ort_int8"] = runner_for("ort_int8", bench, model=onnx_models["ort_int8"])
    runners["ort_all"] = runner_for("ort_all", bench)
    reference = runner_for("ort_none", bench).infer()
    with console.status(f"{name}: timing {len(runners)} labels"):
        medians = {label: timing.median_ms for label, timing in interleaved(runners, 1, repeat, 1).items()}
    rows = []
    for label, runner in runners.items():
        figures = compare(runner.infer(), reference, rtol=0.0, atol=0.0)
        row = {"model": name, "variant": label, "median_ms": medians[label],
               "vs_fp32": medians["fp32 workbench"] / medians[label], "vs_ort_all": medians["ort_all"] / medians[label],
               "cosine": figures["cosine"], "max_abs_err": figures["max_abs_err"], "top1": None,
               "note": notes.get(label, "")}
        if name in TOP1_MODELS:
            def on(sample, label=label):
                return runner_for(label, replace(bench, inputs=sample), builds.get(label), model=onnx_models.get(label))
            row["top1"] = _top1(on, samples, lambda sample: runner_for("ort_none", replace(bench, inputs=sample)))
        if label == "fp16 workbench" and row["vs_fp32"] < 1 and not codegen.target_has_features("avx512fp16", target):
            row["note"] = "slower: this CPU has no native fp16 arithmetic (no avx512fp16), every op converts"
        rows.append(row)
    return rows


HEADER = ("model", "variant", "median ms", "vs fp32 workbench", "vs ort_all", "cosine", "max abs err",
          "top-1 (calib.)", "note")


def cells(r: dict) -> list[str]:
    top1 = f"{r['top1']:.2f}" if r["top1"] is not None else "—"
    return [r["model"], r["variant"], f"{r['median_ms']:.2f}", f"{r['vs_fp32']:.2f}×", f"{r['vs_ort_all']:.2f}×",
            f"{r['cosine']:.5f}", f"{r['max_abs_err']:.2e}", top1, r["note"]]


def markdown(rows: list[dict]) -> str:
    return markdown_table(HEADER, [cells(r) for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="folder for the docs/results page")
    args = parser.parse_args()
    console = Console(stderr=True)
    rows = []
    for name in args.models.split(","):
        rows += bench_model(name, args.repeat, console)
        console.print(markdown(rows))
    print(markdown(rows))
    machine = Machine(target=target_key(make_target(TargetConfig())), threads=cpu_threads())
    protocol = (f"fp32, int8 (symmetric, asymmetric) and fp16 workbench builds against ONNX Runtime (fp32 and its own "
                f"static INT8), median of {args.repeat} runs each; accuracy against the fp32 reference.")
    page = write_results_page(args.out, f"precision_{host_cpu()}", "Precision: INT8 and FP16", machine, protocol,
                              HEADER, [cells(r) for r in rows])
    console.print(f"wrote {page}")


if __name__ == "__main__":
    main()
