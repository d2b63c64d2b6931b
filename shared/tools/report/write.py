"""`write_report`: read every input, build the tables and figures, write the page and the CSV files."""

from __future__ import annotations

from pathlib import Path

from shared.io.atomic import write_atomic
from shared.tools.report import generation_speed, hf_ports
from shared.tools.report.figures import write_figures
from shared.tools.report.printing import markdown_table
from shared.tools.report.reading import read_inputs
from shared.tools.report.readme import render_readme
from shared.tools.report.tables import build_tables, models_table


def write_report(
    results_dir,
    output_dir,
    *,
    equality_path=None,
    training_dir=None,
    backend_paths=(),
    hf_ports_path=None,
    generation_speed_path=None,
) -> dict:
    """Write the comparison report to `output_dir` (README.md, csv/<table>.csv, figures/*.png; a PNG in figures/
    that this report does not draw is removed).

    Args:
        results_dir: the folder of benchmark result files (`**/*.json`); it may be missing.
        output_dir: where the report goes; created if needed.
        equality_path: the equality measurements (JSON); None or missing: "not measured".
        training_dir: the folder of training summaries (`*.json`); None: no loss section data.
        backend_paths: equality measurements on Keras's other backends (`rosetta equality --backend`).
        hf_ports_path: `rosetta hf-ports`'s results (JSON); None or missing: its section says "not measured".
        generation_speed_path: the generation speed bench's results (shared/tools/generation_speed.py), the same way.
    Returns:
        {"headline": the headline table as markdown, "tables": {name: DataFrame}, "missing": [notes],
        "models": the README's model table (markdown), a column per Keras backend, "hf_ports": the README's table
        of Hugging Face models x directions x proofs (markdown)}.
    """
    output = Path(output_dir)
    for folder in (output / "csv", output / "figures"):
        folder.mkdir(parents=True, exist_ok=True)
    inputs = read_inputs(results_dir, equality_path, training_dir, backend_paths)
    ports = hf_ports.load(hf_ports_path, inputs.missing)
    speeds = generation_speed.load(generation_speed_path, inputs.missing)
    tables, context = build_tables(inputs)
    figures = write_figures(inputs, context, output / "figures")
    drawn = {name for figure in figures for name in figure.files}
    for stale in (output / "figures").glob("*.png"):  # a figure no longer drawn (a model's data gone) must not linger
        if stale.name not in drawn:
            stale.unlink()
    for name, table in tables.numeric.items():
        text = table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        write_atomic(output / "csv" / f"{name}.csv", text.encode())
    sections = ["", *hf_ports.section(ports), *generation_speed.section(speeds)]
    page = render_readme(inputs, tables, context, figures) + "\n".join(sections)
    write_atomic(output / "README.md", page.encode())
    headline = markdown_table(tables.shown["headline"])
    models = models_table(inputs.backends)
    return {"headline": headline, "tables": dict(tables.numeric), "missing": list(inputs.missing), "models": models,
            "hf_ports": hf_ports.proofs_table(ports), "generation_speed": generation_speed.speed_table(speeds)}  # fmt: skip
