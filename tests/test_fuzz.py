"""Fuzzing the config loader and the pipeline-text parser: only UserError ever escapes."""

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.config import apply_override, load_experiment, validate
from workbench.config.pipeline_spec import parse_text, to_text
from workbench.errors import UserError

KEYS = ["name", "model", "source", "inputs", "x", "shape", "dtype", "range", "file", "pipeline", "baselines",
        "measure", "repeat", "warmup", "accuracy", "reference", "target", "kind", "seed", "output", "fuse", "mesure"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["zoo:convnet_small", "llvm", "ort_none", "fuse,dce"]))
documents = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.sampled_from(KEYS), children, max_size=5)), max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_validate_raises_only_user_errors(document):
    try:
        validate(document, "fuzz.yaml")
    except UserError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet="abcdefgh_:-[]{},\n\t #'\"=.0123456789&*!|>", max_size=80))
def test_yaml_text_loading_raises_only_user_errors(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text)
    try:
        load_experiment(path, ["measure.repeat=3"])
    except UserError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdef_(),=[]{}0123456789.: '\"-", max_size=60))
def test_pipeline_text_parser_raises_only_user_errors_and_round_trips(text):
    try:
        specs = parse_text(text)
    except UserError:
        return
    assert parse_text(to_text(specs)) == specs


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcmodel.=[]{}:,0123456789 '", max_size=40))
def test_set_overrides_raise_only_user_errors(assignment):
    data = yaml.safe_load("name: t\nmodel: {source: zoo:convnet_small}\nmeasure: {repeat: 3}\n")
    try:
        apply_override(data, assignment)
    except UserError:
        pass
