"""What a run leaves behind: its typed result (result.json), the SQLite results store, the run report with its
plots, and the corpus benchmark's tables."""
