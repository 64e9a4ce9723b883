"""The benchmarks a user runs to compare models (`workbench bench corpus|parity|ops|conformance`): each writes a
generated page into docs/results/ naming the CPU, the date and the versions."""
