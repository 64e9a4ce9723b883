"""Pipeline text form: parsing, errors, and the YAML <-> text round trip."""

import pytest
import yaml

from workbench.config.pipeline_spec import PassSpec, from_yaml, parse_text, to_text
from workbench.errors import UserError


def test_parse_text_with_params_and_nesting():
    specs = parse_text("fold_constant, convert_layout(conv2d=NHWC) ,quantize(keep=[softmax, layer_norm],percentile=99.9),dce")
    assert specs == [
        PassSpec(name="fold_constant"),
        PassSpec(name="convert_layout", params={"conv2d": "NHWC"}),
        PassSpec(name="quantize", params={"keep": ["softmax", "layer_norm"], "percentile": 99.9}),
        PassSpec(name="dce"),
    ]
    assert parse_text("") == [] and parse_text("fuse()") == [PassSpec(name="fuse")]


@pytest.mark.parametrize("text", [
    "fold_constant,fuse,dce",
    "fold_constant,convert_layout(conv2d=NHWC),fuse(opt_level=1),dce",
    "quantize(calibration=entropy,samples=16,keep=[a, b],flag=true,ratio=0.5)",
])
def test_yaml_and_text_round_trip(text):
    specs = parse_text(text)
    assert parse_text(to_text(specs)) == specs
    as_yaml = yaml.safe_load(yaml.safe_dump([s.to_yaml() for s in specs], sort_keys=False))
    assert from_yaml(as_yaml) == specs
    assert to_text(from_yaml(as_yaml)) == to_text(specs)


@pytest.mark.parametrize("text, fragment", [
    ("fuse,,dce", "cannot read step ''"),
    ("fuse(opt_level)", "is not key=value"),
    ("fuse(opt_level=1", "never closed"),
    ("fuse)", "unbalanced"),
    ("9fuse", "cannot read step"),
])
def test_bad_text_is_a_user_error(text, fragment):
    with pytest.raises(UserError, match="pipeline text") as info:
        parse_text(text)
    assert fragment in str(info.value)


def test_from_yaml_rejects_bad_entries():
    with pytest.raises(ValueError, match="entry 0"):
        from_yaml([{"a": 1, "b": 2}])
    with pytest.raises(ValueError, match="must be a mapping"):
        from_yaml([{"fuse": [1]}])
    with pytest.raises(ValueError, match="not a pass name"):
        from_yaml(["fuse-all"])
