"""``python -m proxai_mitm``: reports and exports of recorded LLM exchanges, without a UI.

    uv run python -m proxai_mitm report FILE_OR_DIR [...]     # aligned table on stdout
    uv run python -m proxai_mitm export FILE_OR_DIR OUT.jsonl  # one JSON line per exchange

FILE_OR_DIR is a mitmproxy flow file (``-w``) or a folder of ``*.mitm`` files. Flows recorded without
the addon are annotated on the fly (protocol from the path, StopInfo from the body or the stream).
"""

from __future__ import annotations

import argparse
import sys

from .escape import escape
from .report import export_jsonl, format_table, read_flows, rows


def _say_damage(damaged: list) -> None:
    for d in damaged:
        print(f"warning: {escape(d)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m proxai_mitm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("report", help="print a table of the LLM exchanges in flow files")
    rp.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    ep = sub.add_parser("export", help="write the normalized LLM exchanges as JSON lines")
    ep.add_argument("path", metavar="FILE_OR_DIR")
    ep.add_argument("out", metavar="OUT.jsonl")
    args = ap.parse_args(argv)
    try:
        damaged: list = []
        if args.cmd == "report":
            flows = [f for p in args.paths for f in read_flows(p, damaged)]
            _say_damage(damaged)
            print(format_table(rows(flows)))
            return 0
        flows = read_flows(args.path, damaged)
        _say_damage(damaged)
        count = export_jsonl(flows, args.out)
        print(f"exported {count} LLM exchange(s) to {args.out}", file=sys.stderr)
        return 0
    except (OSError, ValueError) as e:
        print(f"error: {escape(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
