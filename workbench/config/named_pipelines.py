"""Named pipelines, as MLIR registers pass pipelines beside passes: a name that stands for an ordered list of
passes, chosen per target kind. `pipeline: default` (or a step `default` inside a longer list, or
`--pipeline default`) expands where the experiment is validated, so every later stage, result.json and the
report see the passes that ran. No TVM import here: configs load fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config.pipeline_spec import PassSpec, parse_text

# The CPU default: conv_transpose_as_conv first, so no conv2d_transpose (which TVM lowers in NCHW only) holds
# convs back from NHWC; 1-D convs as conv2d, so the layout and packing passes take them; the packed conv kernel where a conv fits it; convert_layout and pack_conv2d leave what
# they cannot take as it was, with the reason in their analysis.
_CPU_DEFAULT = ("fold_constant,fold_batchnorm,conv_transpose_as_conv,conv1d_as_conv2d,convert_layout(conv2d=NHWC),"
                "fold_constant,pack_conv2d,pack_matmul,fast_math,fuse,dce")
_CORE = "fold_constant,fold_batchnorm,fuse,dce"
# The CPU default with convs and matmuls in bf16 where they can be (passes/bf16.py), for CPUs with AVX512_BF16.
_CPU_BF16 = _CPU_DEFAULT.replace(",pack_conv2d,", ",bf16,pack_conv2d,")


@dataclass(frozen=True)
class NamedPipeline:
    name: str
    doc: str
    by_target: dict[str, str]  # target kind -> pipeline text

    def text_for(self, target_kind: str) -> str:
        return self.by_target.get(target_kind, self.by_target.get("*", ""))


NAMED_PIPELINES: dict[str, NamedPipeline] = {p.name: p for p in (
    NamedPipeline("default", "the best general pipeline for the target: any model, untuned or tuned",
                  {"llvm": _CPU_DEFAULT, "cuda": _CORE}),
    NamedPipeline("default_bf16", "default with conv2d and matmul in bf16, fp32 sums (CPUs with AVX512_BF16 only)",
                  {"llvm": _CPU_BF16}),
    NamedPipeline("core", "fold constants and batch norms, fuse, clean up: valid for every model and target",
                  {"*": _CORE}),
)}


def expand(specs: list[PassSpec], target_kind: str) -> list[PassSpec]:
    """`specs` with each named pipeline replaced by its passes for `target_kind`; a ValueError for a named
    pipeline given parameters."""
    expanded: list[PassSpec] = []
    for spec in specs:
        named = NAMED_PIPELINES.get(spec.name)
        if named is None:
            expanded.append(spec)
            continue
        if spec.params:
            raise ValueError(f"{spec.name!r} is a named pipeline and takes no parameters; list its passes instead: "
                             f"{named.text_for(target_kind)}")
        expanded.extend(parse_text(named.text_for(target_kind)))
    return expanded
