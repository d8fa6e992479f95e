"""The loop that runs a workload's ticks, and process signal handling."""
