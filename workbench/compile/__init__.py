"""From a pipeline's output to a loadable library: targets, the lowering tail, MetaSchedule tuning, CUDA kernel report."""
