"""Sweeps: many variants of one experiment (orderings × grid, or an ordering search), crash-isolated, resumable.

spec: the sweep file and its expansion · store: the sweep's SQLite table · workers: the variant function and the
local process pool · ray: the Ray executor · pools: which of the two · run: a batch's phases (hash, tune, measure) ·
driver: the whole sweep or the ordering search (search) · report: ranking, plots, CSV ·
command: the CLI verb. Nothing here imports workbench.cli.
"""
