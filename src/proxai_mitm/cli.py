"""The ``proxai`` command (also ``python -m proxai_mitm``).

    proxai run [--web | --console] [MITMPROXY OPTIONS...]   # mitmdump (or mitmweb / mitmproxy) with ProxAI
    proxai report FILE_OR_DIR... [--format table|json|csv|markdown] [-o FILE|-] [--html FILE]
                  [--by session] [--width COLS] [--stop REASONS] [--model TEXT] [--route NAMES]
                  [--filter EXPR]
    proxai export FILE_OR_DIR... OUT.jsonl|-                # one JSON line per exchange
    proxai addon-path                                       # the script to pass to mitmproxy's -s
    proxai --version

``run`` binds the proxy to 127.0.0.1 unless ``--listen-host`` (or ``--set listen_host=``) says otherwise;
every other option goes to mitmproxy unchanged (``-r`` may name a folder: readdir.py). FILE_OR_DIR is
a mitmproxy flow file (``-w``) or a folder of ``*.mitm`` files; flows recorded without the addon are
annotated on the fly. A path that holds no flow file is an error (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .wire.escape import escape

__all__ = ["addon_path", "main", "run_argv"]

_TOOLS = {"dump": "mitmdump", "web": "mitmweb", "console": "mitmproxy"}


def addon_path() -> Path:
    """The packaged addon script (what ``mitmdump -s`` needs), inside the installed package."""
    return Path(__file__).resolve().with_name("addon_script.py")


def _sets_listen_host(args: Sequence[str]) -> bool:
    for i, a in enumerate(args):
        if a == "--listen-host" or a.startswith("--listen-host="):
            return True
        if a == "--set" and i + 1 < len(args) and args[i + 1].startswith("listen_host="):
            return True
        if a.startswith("--set=listen_host="):
            return True
    return False


def run_argv(tool: str, passthrough: Sequence[str]) -> list[str]:
    """The command line ``proxai run`` executes: the mitmproxy tool in this Python, ProxAI loaded,
    loopback only unless the options choose a listen host."""
    prog = _TOOLS[tool]
    code = f"import sys; from mitmproxy.tools.main import {prog}; sys.argv[0] = {prog!r}; sys.exit({prog}())"
    argv = [sys.executable, "-c", code, "-s", str(addon_path())]
    if not _sets_listen_host(passthrough):
        argv += ["--listen-host", "127.0.0.1"]
    return argv + list(passthrough)


# ----------------------------------------------------------------------------- reading
class BadInput(Exception):
    """A path the report cannot read as flows at all (exit code 2, like a usage error)."""


def _read(paths: Sequence[str]) -> list[Any]:
    """The flows of every path; a damaged file gives a warning and its intact flows, but a file that is
    not a flow file, or a folder without one, is an error (else the report would say 'no LLM flows')."""
    from .redaction.flowfile import flow_files
    from .reporting.report import read_flows

    damaged: list[Any] = []
    flows = []
    for p in paths:
        if Path(p).expanduser().is_dir() and not flow_files(p):
            raise BadInput(f"{p}: no *.mitm flow file in this folder")
        flows += read_flows(p, damaged)
    for d in damaged:
        if d.whole_file:
            raise BadInput(str(d))
        print(f"warning: {escape(d)}", file=sys.stderr)
    return flows


def _width(chosen: int | None, out: TextIO) -> int:
    """The table's width: as chosen, else 120 columns, or the terminal's width when it is narrower."""
    if chosen is not None:
        return chosen
    from .reporting.reportfmt import WIDTH

    try:
        return min(WIDTH, os.get_terminal_size(out.fileno()).columns) if out.isatty() else WIDTH
    except (OSError, ValueError):  # not a real file (a test's capture)
        return WIDTH


def _open_out(target: str | None) -> tuple[TextIO, bool]:
    if target in (None, "-"):
        return sys.stdout, False
    return open(Path(target).expanduser(), "w", encoding="utf-8", newline=""), True


def _why_empty(args: argparse.Namespace, read: int, selected: int, exchanges: int) -> str:
    """Why a report has no row: nothing read, the filter, no LLM flow, or the row filters."""
    if not read:
        return "no flows in " + ", ".join(args.paths)
    if not selected:
        return f"no flow matches --filter {args.filter} ({read} flow(s) read)"
    if not exchanges:
        return f"no LLM flows among the {read} flow(s) read"
    chosen = [f"--{k} {','.join(v) if isinstance(v, list) else v}"
              for k in ("stop", "model", "route") if (v := getattr(args, k, None))]
    return f"no LLM exchange matches {' '.join(chosen)} ({exchanges} exchange(s) read)"


# ----------------------------------------------------------------------------- commands
def _report(args: argparse.Namespace) -> int:
    from .reporting.report import rows
    from .reporting.reportfmt import filter_rows, format_rows, format_sessions, select_flows

    read = _read(args.paths)
    flows = select_flows(read, args.filter)
    every = rows(flows)
    table = filter_rows(every, stop=args.stop, model=args.model, route=args.route)
    if args.html:
        from .reporting.htmlreport import write_html

        ids = {r["id"] for r in table}
        n = write_html([f for f in flows if f.id in ids], table, args.html)
        print(f"wrote {n} exchange(s) to {escape(args.html)}", file=sys.stderr)
    if not table:
        why = escape(_why_empty(args, len(read), len(flows), len(every)))
        if args.format == "table" and args.output in (None, "-"):
            print(why)
            return 0
        print(why, file=sys.stderr)
    out, close = _open_out(args.output)
    try:
        fmt = format_sessions if args.by == "session" else format_rows
        text = fmt(table, args.format, width=_width(args.width, out))
        out.write(text if text.endswith("\n") else text + "\n")
    finally:
        if close:
            out.close()
    return 0


def _export(args: argparse.Namespace) -> int:
    from .reporting.report import exchange
    from .reporting.reportfmt import select_flows

    read = _read(args.paths)
    flows = select_flows(read, args.filter)
    out, close = _open_out(args.out)
    count = 0
    try:
        for f in flows:
            try:
                ex = exchange(f)
            except Exception as e:  # noqa: BLE001 - one odd flow must not stop the export
                ex = {"id": getattr(f, "id", None), "warnings": [f"export failed: {e}"]}
            if ex is None:
                continue
            # ASCII-only JSON: lossless, and no raw control character can reach a terminal
            out.write(json.dumps(ex, ensure_ascii=True, default=str) + "\n")
            count += 1
    finally:
        if close:
            out.close()
    dest = "stdout" if args.out == "-" else args.out
    why = f" ({_why_empty(args, len(read), len(flows), 0)})" if not count else ""
    print(f"exported {count} LLM exchange(s) to {escape(dest)}{escape(why)}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    argv = run_argv(args.tool, rest)
    print("proxai: " + escape(" ".join(["mitm" + args.tool if args.tool != "console" else "mitmproxy",
                                        *argv[3:]])), file=sys.stderr)
    sys.stderr.flush()
    os.execv(argv[0], argv)
    return 0  # not reached


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("proxai-mitm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def parser() -> argparse.ArgumentParser:
    from .reporting.reportfmt import FORMATS

    ap = argparse.ArgumentParser(prog="proxai", description="ProxAI: LLM traffic through mitmproxy — run the proxy, "
                                 "report and export recorded exchanges.")
    ap.add_argument("--version", action="version", version=f"proxai {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rn = sub.add_parser("run", allow_abbrev=False, help="start mitmdump (or --web / --console) with the ProxAI addon on 127.0.0.1; "
                        "other options go to mitmproxy",
                        description="Start mitmdump (or mitmweb / the mitmproxy console) with the ProxAI addon, "
                        "bound to 127.0.0.1 unless --listen-host or --set listen_host= is given. Every other "
                        "option goes to mitmproxy unchanged, e.g. proxai run -p 8080 --mode "
                        "reverse:https://api.anthropic.com --set proxai_target=anthropic_messages")
    g = rn.add_mutually_exclusive_group()
    g.add_argument("--web", dest="tool", action="store_const", const="web", help="mitmweb instead of mitmdump")
    g.add_argument("--console", dest="tool", action="store_const", const="console",
                   help="the mitmproxy console instead of mitmdump")
    rn.set_defaults(tool="dump")

    rp = sub.add_parser("report", help="a table (or JSON, CSV, Markdown, HTML) of the LLM exchanges in flow files")
    rp.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    rp.add_argument("-f", "--format", choices=FORMATS, default="table")
    rp.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default and '-': stdout)")
    rp.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (table, timeline, "
                    "conversations)")
    rp.add_argument("--by", choices=("session",), help="group per session: turns, tokens, cache-read share, "
                    "cost and stops of each, and the turns where a session's cache reads dropped")
    rp.add_argument("--width", type=int, metavar="COLS", help="the table's width (default: 120, or the "
                    "terminal's if narrower; 0: no limit); long model names and stop texts are shortened with …, "
                    "down to about 100 columns")
    rp.add_argument("--stop", action="append", metavar="REASONS",
                    help="only these stop reasons (comma-separated, e.g. refusal,max_output)")
    rp.add_argument("--model", metavar="TEXT", help="only models whose name contains TEXT")
    rp.add_argument("--route", action="append", metavar="NAMES", help="only these routes ('-': unrouted)")
    rp.add_argument("--filter", metavar="EXPR", help="a mitmproxy filter expression, e.g. '~d api.openai.com'")

    ep = sub.add_parser("export", help="write the normalized LLM exchanges as JSON lines ('-': stdout)")
    ep.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    ep.add_argument("out", metavar="OUT.jsonl")
    ep.add_argument("--filter", metavar="EXPR", help="a mitmproxy filter expression")

    sub.add_parser("addon-path", help="print the path of the addon script for mitmproxy's -s")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args, rest = ap.parse_known_args(argv)
    if rest and args.cmd != "run":
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.cmd == "run":
            return _run(args, rest)
        if args.cmd == "addon-path":
            print(addon_path())
            return 0
        if args.cmd == "report":
            return _report(args)
        return _export(args)
    except BrokenPipeError:  # `proxai report ... | head`
        return 0
    except BadInput as e:
        print(f"error: {escape(e)}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: {escape(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
