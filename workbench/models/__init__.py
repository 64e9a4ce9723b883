"""Model sources, ONNX canonicalization, import to Relax and the synthetic zoo."""
