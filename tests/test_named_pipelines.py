"""Named pipelines: `default` and `core` expand per target kind where the experiment is validated, alone or
among passes, and every pass they name is registered."""

import pytest

from workbench.config import validate
from workbench.config.named_pipelines import NAMED_PIPELINES
from workbench.config.pipeline_spec import to_text
from workbench.errors import UserError
from workbench.passes.library import all_passes, lookup

BASE = {"name": "t", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}}}


def test_default_expands_for_the_cpu_and_for_cuda():
    cpu = validate({**BASE, "pipeline": "default"}, "f")
    assert to_text(cpu.pipeline) == NAMED_PIPELINES["default"].by_target["llvm"]
    assert [s.name for s in cpu.pipeline][:5] == ["fold_constant", "fold_batchnorm", "conv_transpose_as_conv",
                                                  "conv1d_as_conv2d", "convert_layout"]
    gpu = validate({**BASE, "target": {"kind": "cuda", "arch": "sm_80"}, "pipeline": ["default"]}, "f")
    assert to_text(gpu.pipeline) == "fold_constant,fold_batchnorm,fuse,dce"


def test_a_name_among_passes_expands_in_place():
    exp = validate({**BASE, "pipeline": "op_histogram,core,kernel_count"}, "f")
    assert [s.name for s in exp.pipeline] == ["op_histogram", "fold_constant", "fold_batchnorm", "fuse", "dce",
                                              "kernel_count"]


def test_a_named_pipeline_takes_no_parameters():
    with pytest.raises(UserError, match="'default' is a named pipeline and takes no parameters"):
        validate({**BASE, "pipeline": "default(x=1)"}, "f")


@pytest.mark.parametrize("name", sorted(NAMED_PIPELINES))
def test_every_pass_a_named_pipeline_expands_to_is_registered_and_no_pass_shares_its_name(name):
    assert name not in {p.name for p in all_passes()}
    for kind in NAMED_PIPELINES[name].by_target:
        for spec in validate({**BASE, "target": {"kind": "cuda", "arch": "sm_80"} if kind == "cuda" else "llvm",
                              "pipeline": name}, "f").pipeline:
            lookup(spec, "test")


def test_workbench_passes_lists_the_named_pipelines(capsys):
    from workbench.cli import main

    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "Named pipelines" in out and "conv_transpose_as_conv" in out and "core" in out
