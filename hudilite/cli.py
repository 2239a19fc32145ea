"""`hudilite` command line: inspect and repair tables without writing Spark code.

    hudilite timeline PATH [--archived]    instants (requested / inflight / completed, completion time, action)
    hudilite rollback PATH [INSTANT]       roll back failed writes (pending writes whose writer's heartbeat
                                           expired; --force: also those of writers that look alive)
    hudilite info PATH                     table properties, partitions and file groups
    hudilite compaction schedule PATH      schedule a compaction plan if its trigger fires (--force: always)
    hudilite compaction run PATH           execute every pending compaction plan, oldest first
    hudilite clean PATH                    finish pending cleans, then plan and run a new one
    hudilite cluster PATH                  schedule a clustering plan and run every pending one
    hudilite archive PATH                  move old instants to .hoodie/archived
    hudilite server start|stop|status      a local Spark Connect server on a warehouse (--warehouse DIR,
                                           --port N): dbt (`method: connect`) and PySpark clients use it
Service options: -o key=value (hoodie.* keys, as for writes). They run while writers keep writing: plans are
decided and completed under the table lock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hudilite import server
from hudilite.api import RollbackRefusedError, Table
from hudilite.errors import HudiliteError
from hudilite.options import check_options

_OPERATION_ACTIONS = ("commit", "deltacommit", "replacecommit")  # their metadata records an operationType


def _timeline(args) -> int:
    tl = Table.open(args.path).timeline
    rows = []
    if getattr(args, "archived", False):
        arch = tl.archived
        for i in arch.instants:
            op = (arch.metadata(i).get("operationType") or "") if i.action in _OPERATION_ACTIONS else ""
            rows.append({"instant": i.timestamp, "action": i.action, "state": f"ARCHIVED/{i.state}",
                         "completed": arch.completion_time(i), "operation": op})
    for i in tl.instants:
        completion = tl.completion_time(i) if i.is_completed else ""
        op = ""
        if i.is_completed and i.action in _OPERATION_ACTIONS:
            op = tl.read_metadata(i).get("operationType", "")
        rows.append({"instant": i.timestamp, "action": i.action, "state": i.state, "completed": completion,
                     "operation": op})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'instant':<18} {'action':<14} {'state':<10} {'completed':<18} operation")
        for r in rows:
            print(f"{r['instant']:<18} {r['action']:<14} {r['state']:<10} {r['completed']:<18} {r['operation']}")
    return 0


def _rollback(args) -> int:
    t = Table.open(args.path, options=_options(args))
    if args.instant:
        try:
            files = t.services.rollback_instant(args.instant, force=args.force)
        except RollbackRefusedError as e:  # the reason alone (no "hudilite:" prefix), as ever
            print(str(e), file=sys.stderr)
            return 2
        print(f"rolled back {args.instant}: {len(files)} file(s) deleted")
    else:
        done = t.services.rollback(force=args.force)
        print(f"rolled back {len(done)} pending instant(s): {', '.join(done) or '-'}")
        for instant, live in t.services.live_writes().items():
            print(f"left alone: {instant} ({live}; --force rolls it back)")
    return 0


def _upgrade(args) -> int:
    done = Table.open(args.path).upgrade(args.to, _options(args))
    print(f"{'upgraded' if done else 'already at'} table version {args.to}: {args.path}")
    return 0


def _info(args) -> int:
    i = Table.open(args.path).info()
    out = {
        "path": i.path, "name": i.name, "type": i.table_type, "version": i.version,
        "record_key": i.record_key, "precombine": i.precombine_field,
        "partition_fields": i.partition_fields, "partitions": len(i.partitions), "file_groups": i.file_groups,
        "bytes": i.bytes, "completed_instants": i.completed_instants, "pending_instants": i.pending_instants,
        "scan": i.scan,
    }
    print(json.dumps(out, indent=2))
    return 0


def _options(args) -> dict:
    out = {}
    for kv in args.option or []:
        if "=" not in kv:
            raise HudiliteError(f"option {kv!r}: expected key=value")
        k, v = kv.split("=", 1)
        out[k.strip()] = v.strip()
    check_options(out)  # a typo exits 2 naming the option, before the table is touched
    return out


def _compaction(args) -> int:
    opts = _options(args)
    t = Table.open(args.path)
    if args.action == "schedule":
        inst = t.services.schedule_compaction(opts, force=args.force)
        print(f"scheduled compaction {inst}" if inst else "nothing to compact (trigger not met or no file group "
              "with log files)")
        return 0
    # wait for a plan another executor holds: when the command returns, every plan it was asked for is complete
    done = t.services.run_compaction(opts, instant=args.instant, progress=not args.no_progress, wait=True)
    print(f"completed {len(done)} compaction(s): {', '.join(done) or '-'}")
    return 0


def _clean(args) -> int:
    t = Table.open(args.path)  # a missing table is reported before a bad option, as ever
    done = t.services.clean(_options(args), progress=not args.no_progress)
    print(f"completed {len(done)} clean(s): {', '.join(done) or '-'}")
    return 0


def _cluster(args) -> int:
    opts = _options(args)
    t = Table.open(args.path)
    if not args.run_only:
        inst = t.services.schedule_clustering(opts, sort_columns=args.sort_columns)
        print(f"scheduled clustering {inst}" if inst else "no clustering scheduled (no partition with small file "
              "groups to combine)")
    if not args.schedule_only:
        done = t.services.run_clustering(opts, progress=not args.no_progress, wait=True,
                                         sort_columns=args.sort_columns)
        print(f"completed {len(done)} clustering(s): {', '.join(done) or '-'}")
    return 0


def _archive(args) -> int:
    t = Table.open(args.path)
    done = t.services.archive(_options(args), force=args.force)
    print(f"archived {len(done)} instant(s)" + (f": {done[0]} .. {done[-1]}" if done else ""))
    return 0


def _server(args) -> int:
    where = f"warehouse {os.path.abspath(args.warehouse)}"
    if args.action == "start":
        conf = {}
        for kv in args.conf or []:
            k, sep, v = kv.partition("=")
            if not sep:
                raise HudiliteError(f"--conf {kv!r}: expected key=value")
            conf[k.strip()] = v.strip()
        info = server.start(args.warehouse, port=args.port, host=args.host, master=args.master, spark_conf=conf)
        print(f"Spark Connect server for {where} running at {info.url} (pid {info.pid}, log {info.log})"
              + _token_note(info))
        if not info.token_required and not server.is_loopback(info.host):
            print(f"warning: the server listens on {info.host} without a token: anyone who reaches port "
                  f"{info.port} runs code as this user. Stop it, set {server.TOKEN_ENV} (or --conf "
                  f"{server.TOKEN_CONF}=...) and start it again", file=sys.stderr)
        return 0
    if args.action == "stop":
        pending = server.read_state(args.warehouse)
        if pending is not None and pending.class_dump:
            print("the server's JVM writes its class archive as it exits (once per install; later servers "
                  "start faster): waiting for it", flush=True)
        info = server.stop(args.warehouse)
        print(f"stopped the Spark Connect server at {info.url} (pid {info.pid})" if info
              else f"no Spark Connect server recorded for {where}")
        return 0
    info = server.status(args.warehouse)  # a stale server raises, naming the command to run
    if info is None:
        print(f"no Spark Connect server for {where}. Start one with: {server.start_command(args.warehouse)}")
        return 1
    print(f"Spark Connect server for {where} running at {info.url} (pid {info.pid}, python {info.python}, "
          f"log {info.log})" + _token_note(info))
    return 0


def _token_note(info) -> str:
    return f"; clients must send its token (dbt profile `token`, or {server.TOKEN_ENV})" if info.token_required \
        else ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="hudilite", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("timeline", help="list the instants of a table")
    s.add_argument("path")
    s.add_argument("--json", action="store_true")
    s.add_argument("--archived", action="store_true", help="also list the archived instants")
    s.set_defaults(fn=_timeline)

    def service(name, fn, help_):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("path")
        sp.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="a hoodie.* option")
        sp.add_argument("--no-progress", action="store_true", help="no progress bar")
        sp.set_defaults(fn=fn)
        return sp

    s = sub.add_parser("compaction", help="schedule or run compactions of a merge-on-read table")
    csub = s.add_subparsers(dest="action", required=True)
    for action, help_ in (("schedule", "schedule a plan if the trigger fires"), ("run", "run pending plans")):
        sp = csub.add_parser(action, help=help_)
        sp.add_argument("path")
        sp.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="a hoodie.* option")
        sp.add_argument("--no-progress", action="store_true", help="no progress bar")
        if action == "schedule":
            sp.add_argument("--force", action="store_true", help="schedule whatever the trigger says")
        else:
            sp.add_argument("--instant", help="run only this pending plan")
        sp.set_defaults(fn=_compaction)
    service("clean", _clean, "remove file slices outside the retention policy")
    s = service("cluster", _cluster, "rewrite small file groups into well-sized ones")
    s.add_argument("--sort-columns", help="comma-separated columns to sort by")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--schedule-only", action="store_true", help="only schedule a plan (async mode)")
    g.add_argument("--run-only", action="store_true", help="only run pending plans")
    s = service("archive", _archive, "move old instants out of the active timeline")
    s.add_argument("--force", action="store_true", help="archive down to hoodie.keep.min.commits now")
    s = sub.add_parser("rollback", help="roll back pending (failed) writes")
    s.add_argument("path")
    s.add_argument("instant", nargs="?")
    s.add_argument("--force", action="store_true",
                   help="also roll back writes whose writer looks alive (only when no writer is running)")
    s.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="a hoodie.* option (the lock)")
    s.set_defaults(fn=_rollback)
    s = sub.add_parser("upgrade", help="upgrade a version-6 table to version 9 (Apache Hudi 1.x)")
    s.add_argument("path")
    s.add_argument("--to", type=int, default=9, choices=(9,))
    s.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="a hoodie.* option (the lock)")
    s.set_defaults(fn=_upgrade)
    s = sub.add_parser("info", help="table properties and layout summary")
    s.add_argument("path")
    s.set_defaults(fn=_info)
    s = sub.add_parser("server", help="a local Spark Connect server on a warehouse")
    s.add_argument("action", choices=("start", "stop", "status"))
    s.add_argument("--warehouse", default=os.environ.get("HUDILITE_WAREHOUSE", "."),
                   help="the warehouse directory (its catalog in DIR/.metastore); default: $HUDILITE_WAREHOUSE or .")
    s.add_argument("--port", type=int, default=None, help=f"default {server.DEFAULT_PORT}")
    s.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default: loopback only; elsewhere start it with a token: "
                        f"${server.TOKEN_ENV} or --conf {server.TOKEN_CONF}=...)")
    s.add_argument("--master", default="local[*]")
    s.add_argument("--conf", action="append", metavar="KEY=VALUE", help="a Spark setting of the server")
    s.set_defaults(fn=_server)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except HudiliteError as e:
        print(f"hudilite: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
