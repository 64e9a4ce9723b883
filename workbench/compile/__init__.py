"""From a pipeline's output to a loadable library: targets, builds, schedule databases, MetaSchedule tuning (tasks,
design spaces, the loop), the tuned-schedule check, the CUDA kernel report."""
