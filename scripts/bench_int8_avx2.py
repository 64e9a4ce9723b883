"""Benchmark: int8 on an AVX2 CPU without VNNI (the `AVX2_U8S8` kernel: vpmaddubsw + vpmaddwd, 7-bit weights)
against the fp32 builds and ONNX Runtime, in one process, timed in interleaved rounds.

    python scripts/bench_int8_avx2.py [--config configs/convnet_small_int8.yaml] [--repeat 50] [--rounds 7]

Labels (all on the config's model and inputs, every runtime on the same thread count):

- `int8 avx2 (znver2)`   the config's int8 pipeline built for an AVX2 CPU (`--avx2-cpu`, default znver2), untuned
- `int8 vnni (host)`     the same pipeline built for this CPU, where it has AVX-512 VNNI (the VNNI kernel)
- `fp32 default (znver2)`, `fp32 default (host)`   `pipeline: default` (NHWC, packed fp32 convs), untuned
- `ort_int8`             ONNX Runtime's static QDQ quantization on the same calibration inputs; its MLAS picks
                         its kernels at run time, so on a VNNI host it runs VNNI (full 8-bit weights)
- `ort_all`              ONNX Runtime fp32, all graph optimizations; `ort_none` is the accuracy reference

A build for an AMD CPU may use SSE4a (`insertq`, `extrq`), which Intel CPUs lack, so on an Intel host the AVX2
CPU's build drops it (`-sse4a`); everything else (AVX2, FMA, the scheduling model) stays the AVX2 CPU's.
Prints the medians, the ratios to the AVX2 int8 build (> 1: it is faster) and each label's accuracy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import tvm
from tvm.target import codegen

from workbench.compile.targets import host_cpu, make_target
from workbench.config import TargetConfig, load_experiment
from workbench.config.named_pipelines import expand
from workbench.config.pipeline_spec import parse_text
from workbench.measure.factory import Bench, runner_for
from workbench.measure.ort_quant import ort_int8_model
from workbench.measure.timing import interleaved_medians
from workbench.models.accuracy import compare
from workbench.runtime.threads import cpu_threads
from workbench.stages import build, optimize, prepare

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = expand(parse_text("default"), "llvm")  # the fp32 CPU default pipeline


def avx2_target(mcpu: str) -> tvm.target.Target:
    """An llvm target for `mcpu` that this host can run: without SSE4a where the host has none (Intel)."""
    target = make_target(TargetConfig(mcpu=mcpu))
    host = set(codegen.llvm_get_cpu_features(make_target(TargetConfig())))
    if "sse4a" in set(codegen.llvm_get_cpu_features(target)) - host:
        target = tvm.target.Target({**dict(target.attrs), "kind": "llvm", "mattr": ["-sse4a"]})
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/convnet_small_int8.yaml")
    parser.add_argument("--avx2-cpu", default="znver2")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    experiment = load_experiment(ROOT / args.config)
    host, avx2 = make_target(TargetConfig()), avx2_target(args.avx2_cpu)
    builds = {f"int8 avx2 ({args.avx2_cpu})": (experiment.pipeline, avx2),
              "int8 vnni (host)": (experiment.pipeline, host),
              f"fp32 default ({args.avx2_cpu})": (DEFAULT, avx2),
              "fp32 default (host)": (DEFAULT, host)}
    work_dir = ROOT / "runs" / "bench_int8_avx2"
    runners, notes = {}, {}
    for label, (pipeline, target) in builds.items():
        prepared = prepare(experiment, ROOT, target)
        optimized = optimize(prepared, pipeline, stats=False)
        bench = Bench(prepared.canonical, prepared.inputs, target, work_dir)
        runners[label] = runner_for(label, bench, build(optimized, target))
        int8 = next((r.analysis["int8"] for r in optimized.records if "int8" in r.analysis), None)
        notes[label] = f"vnni {int8['vnni']}, avx2 {int8['avx2']} kernels" if int8 else ""
    bench = Bench(prepared.canonical, prepared.inputs, host, work_dir)
    runners["ort_int8"] = runner_for("ort_int8", bench, model=ort_int8_model(experiment, bench.model, work_dir))
    runners["ort_all"] = runner_for("ort_all", bench)
    reference = runner_for("ort_none", bench).infer()
    medians = interleaved_medians(runners, args.repeat, args.rounds)
    base = medians[f"int8 avx2 ({args.avx2_cpu})"]
    print(f"host {host_cpu()}, {cpu_threads()} threads, {args.rounds} rounds x {args.repeat} runs")
    print("| label | median ms | label / int8 avx2 | cosine | max abs err | note |")
    print("|---|---:|---:|---:|---:|---|")
    for label, runner in runners.items():
        figures = compare(runner.infer(), reference, rtol=0.0, atol=0.0)
        print(f"| {label} | {medians[label]:.3f} | {medians[label] / base:.2f}× | {figures['cosine']:.5f} | "
              f"{figures['max_abs_err']:.2e} | {notes.get(label, '')} |")


if __name__ == "__main__":
    main()
