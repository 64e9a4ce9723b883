"""workbench: ONNX -> Relax pass pipelines -> builds measured against baselines."""

__version__ = "0.1.0"
