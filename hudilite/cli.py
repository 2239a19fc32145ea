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
Service options: -o key=value (hoodie.* keys, as for writes). They run while writers keep writing: plans are
decided and completed under the table lock.
"""

from __future__ import annotations

import argparse
import json
import sys

from hudilite.errors import HudiliteError
from hudilite.options import check_options
from hudilite.table import HoodieTable

_OPERATION_ACTIONS = ("commit", "deltacommit", "replacecommit")  # their metadata records an operationType


def _timeline(args) -> int:
    t = HoodieTable.open(args.path)
    tl = t.timeline
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
    from hudilite.services.rollback import rollback_failed_writes, rollback_instant
    from hudilite.writer.conflict import pending_guard

    t = HoodieTable.open(args.path)
    if args.instant:
        inst = t.timeline.get(args.instant)
        if inst is None:
            print(f"no instant {args.instant} on the timeline of {t.base_path}", file=sys.stderr)
            return 2
        if inst.is_completed:
            print(f"instant {args.instant} is completed; only pending writes can be rolled back", file=sys.stderr)
            return 2
        from hudilite.writer.transaction import Transaction

        with Transaction(t, {}).lock:  # no writer completes it meanwhile
            tl = t.reload()
            inst = tl.get(args.instant)
            guard = pending_guard(tl, inst) if inst is not None and not inst.is_completed else None
            if guard is not None:
                print(f"instant {args.instant} is a {guard[0]}, not a failed write: its owner finishes it "
                      "(hudilite compaction run / cluster --run-only / the streaming query's restart)", file=sys.stderr)
                return 2
            if inst is None or inst.is_completed:
                print(f"instant {args.instant} completed or vanished meanwhile; nothing to roll back", file=sys.stderr)
                return 2
            live = _live_writer(t, args.instant)
            if live and not args.force:
                print(f"instant {args.instant} belongs to a writer that is alive ({live}); rolling it back would "
                      "fail that write. Use --force if you know the writer is dead", file=sys.stderr)
                return 2
            files = rollback_instant(t, inst)
        print(f"rolled back {args.instant}: {len(files)} file(s) deleted")
    else:
        done = rollback_failed_writes(t, lazy=not args.force)
        print(f"rolled back {len(done)} pending instant(s): {', '.join(done) or '-'}")
        tl = t.reload()
        for inst in tl.pending():
            live = _live_writer(t, inst.timestamp)
            if live and pending_guard(tl, inst) is None:
                print(f"left alone: {inst.timestamp} ({live}; --force rolls it back)")
    return 0


def _live_writer(t, instant: str) -> str | None:
    """Why the writer of a pending `instant` counts as alive (its heartbeat within its tolerance), or None."""
    from hudilite.timeline.heartbeat import DEFAULT_INTERVAL_MS, DEFAULT_MISSES, read_heartbeat

    hb = read_heartbeat(t.base_path, instant)
    if hb is None:
        return None
    tolerance = hb["tolerance_ms"] or DEFAULT_INTERVAL_MS * DEFAULT_MISSES
    if hb["age_ms"] > tolerance:
        return None
    return (f"heartbeat {hb['age_ms'] / 1000:.1f} s old, tolerance {tolerance / 1000:.0f} s: rolled back "
            f"automatically once it is {tolerance / 1000:.0f} s old")


def _info(args) -> int:
    t = HoodieTable.open(args.path)
    parts = t.partitions()
    slices = t.view().latest_slices(parts)
    out = {
        "path": t.base_path, "name": t.config.name, "type": t.config.table_type, "version": t.config.version,
        "record_key": t.config.record_key_fields, "precombine": t.config.precombine_field,
        "partition_fields": t.config.partition_fields, "partitions": len(parts), "file_groups": len(slices),
        "bytes": sum(s.base_file.size for s in slices if s.base_file),
        "completed_instants": len(t.timeline.completed()), "pending_instants": len(t.timeline.pending()),
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
    from hudilite.services.compaction import run_compaction, schedule_compaction

    opts = _options(args)
    t = HoodieTable.open(args.path)
    if args.action == "schedule":
        inst = schedule_compaction(t, opts, force=args.force)
        print(f"scheduled compaction {inst}" if inst else "nothing to compact (trigger not met or no file group "
              "with log files)")
        return 0
    # wait for a plan another executor holds: when the command returns, every plan it was asked for is complete
    done = run_compaction(t, opts, instant=args.instant, progress=not args.no_progress, wait=True)
    print(f"completed {len(done)} compaction(s): {', '.join(done) or '-'}")
    return 0


def _clean(args) -> int:
    from hudilite.services.clean import run_clean

    done = run_clean(HoodieTable.open(args.path), _options(args), progress=not args.no_progress)
    print(f"completed {len(done)} clean(s): {', '.join(done) or '-'}")
    return 0


def _cluster(args) -> int:
    from hudilite.services.clustering import SORT_KEY, run_clustering, schedule_clustering

    opts = _options(args)
    if args.sort_columns:
        opts[SORT_KEY] = args.sort_columns
    t = HoodieTable.open(args.path)
    if not args.run_only:
        inst = schedule_clustering(t, opts)
        print(f"scheduled clustering {inst}" if inst else "no clustering scheduled (no partition with small file "
              "groups to combine)")
    if not args.schedule_only:
        done = run_clustering(t, opts, progress=not args.no_progress, wait=True)
        print(f"completed {len(done)} clustering(s): {', '.join(done) or '-'}")
    return 0


def _archive(args) -> int:
    from hudilite.services.archival import archive

    done = archive(HoodieTable.open(args.path), _options(args), force=args.force)
    print(f"archived {len(done)} instant(s)" + (f": {done[0]} .. {done[-1]}" if done else ""))
    return 0


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
    s.set_defaults(fn=_rollback)
    s = sub.add_parser("info", help="table properties and layout summary")
    s.add_argument("path")
    s.set_defaults(fn=_info)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except HudiliteError as e:
        print(f"hudilite: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
