"""The host CPU as the default llvm target, and tuning databases kept per resolved target."""

import json
from pathlib import Path

import pytest
import tvm
from tvm import te

from workbench.compile.databases import TARGET_FILE, WORKLOADS_FILE, choose_database, tuning_folder
from workbench.compile.targets import cpu_features, host_cpu, make_target, resolved, target_key
from workbench.config import TargetConfig
from workbench.errors import UserError


def vectorized_asm(target: tvm.target.Target) -> str:
    """Assembly of c = 2a + b vectorized by 8 lanes, compiled for `target`."""
    a, b = te.placeholder((1024,), "float32", name="a"), te.placeholder((1024,), "float32", name="b")
    c = te.compute((1024,), lambda i: a[i] * 2.0 + b[i], name="c")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b, c]))
    _, inner = sch.split(sch.get_loops(sch.get_sblock("c"))[0], [None, 8])
    sch.vectorize(inner)
    return tvm.compile(sch.mod, target).mod.inspect_source("asm")


def test_llvm_without_mcpu_compiles_for_the_host_cpu():
    target = make_target(TargetConfig(kind="llvm"))
    assert str(target.attrs["mcpu"]) == host_cpu()
    assert target_key(target) == f"llvm-{host_cpu()}"
    assert make_target(TargetConfig(kind="llvm", mcpu="host")).attrs["mcpu"] == host_cpu()
    generic = make_target(TargetConfig(kind="llvm", mcpu="generic"))
    assert "mcpu" not in generic.attrs and target_key(generic) == "llvm-generic"
    record = resolved(target)
    assert record["host_cpu"] == host_cpu() and record["mcpu"] == host_cpu() and record["key"] == target_key(target)


@pytest.mark.skipif("avx2" not in cpu_features(make_target(TargetConfig())), reason="the host CPU has no AVX2")
def test_host_build_uses_the_wide_vector_units_and_generic_does_not():
    host = vectorized_asm(make_target(TargetConfig()))
    generic = vectorized_asm(make_target(TargetConfig(mcpu="generic")))
    assert "ymm" in host and "vfmadd" in host  # 256-bit registers and fused multiply-add: AVX2 + FMA
    assert "ymm" not in generic and "vfmadd" not in generic  # baseline x86-64: 128-bit SSE only
    assert "xmm" in generic


def test_an_explicit_cpu_cross_compiles_and_an_unknown_one_is_refused():
    skylake = make_target(TargetConfig(mcpu="skylake-avx512"))
    assert target_key(skylake) == "llvm-skylake-avx512" and "avx512f" in cpu_features(skylake)
    assert "vfmadd" in vectorized_asm(skylake)
    with pytest.raises(UserError, match="LLVM does not know this CPU"):
        make_target(TargetConfig(mcpu="znver99"))


def fake_database(root: Path, target: tvm.target.Target) -> Path:
    """A folder as tuning leaves it for `target` (target.json and an empty workload file)."""
    folder = tuning_folder(root, target)
    (folder / WORKLOADS_FILE).write_text("")
    return folder


def test_tuning_writes_per_target_folders_and_builds_take_their_own(tmp_path):
    host = make_target(TargetConfig())
    generic = make_target(TargetConfig(mcpu="generic"))
    host_folder = fake_database(tmp_path, host)
    generic_folder = fake_database(tmp_path, generic)
    assert host_folder == tmp_path / target_key(host) and generic_folder == tmp_path / "llvm-generic"
    recorded = json.loads((host_folder / TARGET_FILE).read_text())
    assert recorded["key"] == target_key(host) and recorded["features"] == cpu_features(host)
    for target, folder in ((host, host_folder), (generic, generic_folder)):
        choice = choose_database(tmp_path, target, "workbench tune x.yaml")
        assert (choice.path, choice.match, choice.note) == (folder, "exact", None)


def test_a_cpu_without_a_database_takes_the_closest_and_says_so(tmp_path):
    fake_database(tmp_path, make_target(TargetConfig(mcpu="generic")))
    avx512 = fake_database(tmp_path, make_target(TargetConfig(mcpu="skylake-avx512")))
    choice = choose_database(tmp_path, make_target(TargetConfig(mcpu="icelake-server")), "workbench tune x.yaml")
    assert choice.path == avx512 and choice.match == "closest"  # shares AVX-512 with it, not with generic
    assert "tuned for llvm-skylake-avx512" in choice.note and "workbench tune x.yaml" in choice.note


def test_no_database_for_the_kind_is_untuned_with_the_command_that_tunes(tmp_path):
    fake_database(tmp_path, make_target(TargetConfig()))
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    choice = choose_database(tmp_path, cuda, "workbench tune x.yaml")
    assert choice.path is None and choice.match == "none"
    assert choice.note == f"untuned: no database for cuda-sm_90 in {tmp_path}; tune it: workbench tune x.yaml"
    with pytest.raises(UserError, match="run `workbench tune x.yaml` first"):
        choose_database(tmp_path / "missing", cuda, "workbench tune x.yaml")


def test_a_root_that_is_itself_a_database_is_used_as_is(tmp_path):
    (tmp_path / WORKLOADS_FILE).write_text("")
    host = make_target(TargetConfig())
    assert tuning_folder(tmp_path, host) == tmp_path
    choice = choose_database(tmp_path, host, "workbench tune x.yaml")
    assert choice.path == tmp_path and choice.match == "closest" and "unrecorded target" in choice.note
