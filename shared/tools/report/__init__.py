"""The comparison report: speed of both stacks, their equality, and the reproduction runs, on one page.

`write_report` reads the benchmark result files (`<results_dir>/**/*.json`, one run each), the equality
file (`rosetta equality`'s measurements: maxima, greedy ids, loss curves, attention maps) and the training
summaries (`shared.tools.reproduction`), and writes `README.md`, one CSV per table (`csv/`) and the figures
(`figures/`), all atomically. Nothing in the page depends on the clock, the folder it is written to or
the order files are listed in, so the same inputs give byte-identical README.md and CSV files.

An unreadable file, a file without rows, or a row without the fields it needs never stops the report:
it is skipped and listed under "Missing or unreadable results". pandas, matplotlib and tabulate are
imported inside the functions, so `import shared` stays numpy-only.
"""

from __future__ import annotations

from shared.tools.report.schema import NO_GPU, NO_RESULTS
from shared.tools.report.write import write_report

__all__ = ["NO_GPU", "NO_RESULTS", "write_report"]
