"""Per-kernel profiles: the workbench build's kernels timed in the VM, ONNX Runtime's nodes from its trace."""

import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm
import yaml
from tvm import relax

from workbench.cli import main
from workbench.compile.build import build_lowered
from workbench.config import load_experiment
from workbench.measure import profile as profile_module
from workbench.measure.profile import VM_BUILTINS, ort_profile, tvm_profile
from workbench.passes.pipeline import run_pipeline


@pytest.fixture(scope="module")
def convnet(zoo_relax, llvm):
    model, imported = zoo_relax("convnet_small")
    optimized, _ = run_pipeline(imported, load_experiment(Path("configs/quickstart.yaml")).pipeline, llvm, stats=False)
    inputs = {"x": np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)}
    return model, build_lowered(optimized, llvm), inputs


@pytest.fixture
def charged(monkeypatch) -> dict[str, float]:
    """Calls that take a known time, so the profile's figures do not depend on load: the profiler's clock moves
    only while a call runs, by that call's charge in µs (a builtin 1, each kernel 2, 3, ... in the order first
    called). The VM still runs every call. Returns the charges by symbol, filled as the calls come."""
    charges: dict[str, float] = {}
    kernels, now = itertools.count(2), [0.0]
    set_instrument = relax.VirtualMachine.set_instrument

    def charging(vm: relax.VirtualMachine, instrument: Callable[..., int]) -> None:
        def timed(func, symbol: str, before: bool, ret, *args) -> int:
            kind = instrument(func, symbol, before, ret, *args)
            if before:  # between the instrument's reading of the clock before the call and the one after it
                if symbol not in charges:
                    charges[symbol] = 1.0 if symbol.startswith("vm.builtin.") else float(next(kernels))
                now[0] += charges[symbol] * 1e-6
            return kind

        set_instrument(vm, timed)

    monkeypatch.setattr(relax.VirtualMachine, "set_instrument", charging)
    monkeypatch.setattr(profile_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    return charges


def test_tvm_profile_times_every_kernel_of_the_build_once_per_inference(convnet, charged):
    _model, built, inputs = convnet
    profile = tvm_profile(built.executable, inputs, tvm.cpu(), warmup=1, runs=3)
    kernels = {gv.name_hint for gv, func in built.lowered.functions.items() if isinstance(func, tvm.tirx.PrimFunc)}
    names = {k.name for k in profile.kernels}
    assert names - {VM_BUILTINS} == kernels  # every kernel the build calls, nothing else but the VM's builtins
    main_text = built.lowered["main"].script()
    assert all(k.calls == len(re.findall(rf"\b{k.name}\(", main_text))  # once per call site (a pad serves 3 convs)
               for k in profile.kernels if k.name != VM_BUILTINS)
    assert [k.us for k in profile.kernels] == sorted((k.us for k in profile.kernels), reverse=True)
    assert all(k.us == pytest.approx((charged[k.name] - 1.0) * k.calls)  # each call's time, less the instrument's
               for k in profile.kernels if k.name != VM_BUILTINS)
    assert sum(k.share for k in profile.kernels) == pytest.approx(1.0)


def test_tvm_profile_charges_kernels_less_the_instrument_and_builtins_the_rest(convnet, charged):
    """Timed around each call, the builtins' row was mostly the instrument's own Python round trips: the
    kernels are charged their interval less the instrument's cost, the builtins what is left of the plain latency."""
    _model, built, inputs = convnet
    profile = tvm_profile(built.executable, inputs, tvm.cpu(), warmup=1, runs=5)
    assert profile.instrument_us == pytest.approx(1.0) and profile.plain_us > 0  # the shortest call: a builtin's
    assert profile.as_dict()["instrument_us"] == profile.instrument_us
    assert all(k.us >= 0 for k in profile.kernels)
    kernels = sum(k.us for k in profile.kernels if k.name != VM_BUILTINS)
    builtins = next(k for k in profile.kernels if k.name == VM_BUILTINS)
    assert builtins.calls > 0
    assert builtins.us == pytest.approx(max(profile.plain_us - kernels, 0.0))
    assert profile.total_us == pytest.approx(max(profile.plain_us, kernels))


def test_ort_profile_reads_the_node_trace_after_the_warmup(convnet, tmp_path):
    model, _built, inputs = convnet
    profile = ort_profile(model, inputs, tmp_path, warmup=2, runs=4)
    ops = [k.name.split()[0] for k in profile.kernels]
    assert ops.count("Conv") == 6 and "Gemm" in ops  # ORT fuses BN and ReLU into its 6 convs
    assert all(k.calls == 1 for k in profile.kernels)  # warm-up runs left out, the rest averaged
    assert list(tmp_path.glob("ort_all_profile*.json"))  # the trace is kept beside the run's files
    assert profile.as_dict(top=3)["other"]["kernels"] == len(profile.kernels) - 3


def test_profile_verb_writes_both_sides_into_result_and_report(tmp_path, capsys):
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.update(output=str(tmp_path / "run"), measure={"warmup": 1, "repeat": 3})
    config.pop("tuning")
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["profile", str(path), "--top", "3"]) == 0
    result = json.loads((tmp_path / "run" / "profile" / "result.json").read_text())
    assert set(result["measurements"]) == {"workbench", "ort_all"} and result["accuracy"]["workbench"]["ok"]
    for label in ("workbench", "ort_all"):
        side = result["profile"][label]
        assert len(side["kernels"]) == 3 and side["other"]["kernels"] > 0
        assert side["total_us"] == pytest.approx(sum(k["us"] for k in side["kernels"]) + side["other"]["us"])
    report = (tmp_path / "run" / "profile" / "report.md").read_text()
    assert "## Where the time goes" in report and result["profile"]["workbench"]["kernels"][0]["name"] in report
    assert "where the time goes" in capsys.readouterr().out
