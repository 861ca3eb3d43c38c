"""Run machinery for any device and any algorithm: crash-safe files, checkpoints, journal, watchdog, cluster."""
