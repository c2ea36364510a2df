"""Reports: the comparison table of runs, artifacts and eval sets, and its figures."""
