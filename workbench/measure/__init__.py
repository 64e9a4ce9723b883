"""Running builds and baselines: inputs, runners (TVM, ONNX Runtime, IREE), timing statistics, accuracy, RPC."""
