"""The `rosetta` command line. Frameworks are imported only by the subcommand that needs them."""

from __future__ import annotations

import argparse
import importlib
import sys

from shared import catalogue
from shared.atomic import write_atomic


def _models(args) -> int:
    print(f"{'name':26} {'doc':4} {'document class':40} {'module':16} {'status'}")
    for spec in catalogue.CATALOGUE.values():
        status = "built" if spec.built else "not yet built"
        print(f"{spec.name:26} {spec.document:4} {spec.doc_class:40} {spec.module + '.py':16} {status}")
    return 0


def _fixtures(args) -> int:
    import torch  # noqa: F401  (imported before tensorflow, as everywhere in the suite)

    from shared import fixtures

    torch.set_num_threads(1)  # one thread: float64 sums in one fixed order
    stack = importlib.import_module("torch_impl")
    names = args.models or catalogue.built()
    changed = fixtures.write_goldens(stack, names, check=args.check)
    verb = "differ from a fresh generation" if args.check else "rewritten"
    print(f"{len(names)} golden files checked; {len(changed)} {verb}: {', '.join(changed) or 'none'}")
    return 1 if args.check and changed else 0


def _equality(args) -> int:
    from pathlib import Path

    import torch  # noqa: F401  (torch before tensorflow in one process)

    from shared import equality

    stacks = [importlib.import_module(module) for module in ("torch_impl", "tf_impl")]
    rows, failures = {}, []
    for name in args.models or catalogue.built():
        for dtype in catalogue.DTYPES[::-1]:
            try:
                rows[name, dtype] = equality.compare_stacks(name, dtype, *stacks)
            except AssertionError as error:
                failures.append(str(error))
    title = "Max |torch - tf| on the golden fixtures (outputs, loss: float64 <= 1e-12, float32 <= 1e-5 + 1e-5 rel)"
    lines = [f"# {title}", "", *equality.maxima_table(rows), "", *(f"FAILED: {failure}" for failure in failures)]
    text = "\n".join(lines).rstrip() + "\n"
    print(text, end="")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.output, text.encode())
    if args.readme and not failures:
        _replace_block(Path(args.readme), "equality", "\n".join(equality.maxima_table(rows)))
    return 1 if failures else 0


def _replace_block(path, block: str, text: str) -> None:
    """Replace what stands between `<!-- <block>:start -->` and `<!-- <block>:end -->` in `path`."""
    start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
    page = path.read_text()
    if start not in page or end not in page:
        raise ValueError(f"{path} has no {start} ... {end} block to fill")
    head, rest = page.split(start, 1)
    write_atomic(path, f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}".encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rosetta", description="Attention seq2seq models proved equal in PyTorch and Keras.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("models", help="list the catalogue").set_defaults(func=_models)
    fixtures = commands.add_parser("fixtures", help="regenerate the golden files with the torch stack (float64)")
    fixtures.add_argument("models", nargs="*", help="catalogue names (default: every built model)")
    fixtures.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    fixtures.set_defaults(func=_fixtures)
    equality = commands.add_parser("equality", help="measure max |torch - tf| of every built model (needs both stacks)")
    equality.add_argument("models", nargs="*", help="catalogue names (default: every built model)")
    equality.add_argument("--output", help="also write the markdown table to this file")
    equality.add_argument("--readme", help="also fill the table into this README's results block")
    equality.set_defaults(func=_equality)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:
        print(f"rosetta: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
