"""Model sources, ONNX canonicalization (LSTM/GRU unrolled), inputs, import to Relax, output comparison, the
synthetic zoo and the real-model corpus."""
