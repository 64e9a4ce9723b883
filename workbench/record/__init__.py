"""What a run leaves behind: the SQLite results store and the run report with its plots."""
