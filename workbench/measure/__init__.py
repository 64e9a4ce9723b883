"""Running builds and baselines: runners (TVM, ONNX Runtime, IREE), timing statistics, per-kernel profiles."""
