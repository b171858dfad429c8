"""Benchmarking: one timing method for every backend, machine ceilings, JSONL results, reports.

Modules (each small, one job):
  timing.py     GPU timing (CUDA-graph replay or stream launches, CUDA events, L2 flush, median/p20/p80)
                and the host-side timers (first call, launch overhead, labelled CPU fallback)
  ceilings.py   copy bandwidth and GEMM peak measured at the start of each run, beside the datasheet peak
  results.py    the results-file schema, a crash-safe JSONL writer, the loader, derived metrics
  environment.py  GPU, driver, CUDA, toolchain, package versions and git commit of a run
  runner.py     `tilerosetta bench`: plan, check-then-time each case, resume, summary
  sweep.py      `tilerosetta sweep`: time a backend over its config space, write the best to the table
  scaling.py    `tilerosetta bench --scaling`: the specs' size sweeps as a plan, under a time budget
  report.py     Markdown + self-contained HTML report with matplotlib plots; headline vs the best peer
  scaling_report.py  the report's scaling figures (time and % of ceiling against size) and launch table
  compare.py    `tilerosetta compare OLD NEW`: per-case changes beyond noise
"""
