"""The `rosetta` command line. Frameworks are imported only by the subcommand that needs them."""

from __future__ import annotations

import argparse
import importlib
import sys

from shared import catalogue


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rosetta", description="Attention seq2seq models proved equal in PyTorch and Keras.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("models", help="list the catalogue").set_defaults(func=_models)
    fixtures = commands.add_parser("fixtures", help="regenerate the golden files with the torch stack (float64)")
    fixtures.add_argument("models", nargs="*", help="catalogue names (default: every built model)")
    fixtures.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    fixtures.set_defaults(func=_fixtures)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:
        print(f"rosetta: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
