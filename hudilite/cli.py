"""`hudilite` command line: inspect and repair tables without writing Spark code.

    hudilite timeline PATH            instants (requested / inflight / completed, completion time, action)
    hudilite rollback PATH [INSTANT]  roll back a pending write (all pending writes if no instant is given)
    hudilite info PATH                table properties, partitions and file groups
"""

from __future__ import annotations

import argparse
import json
import sys

from hudilite.errors import HudiliteError
from hudilite.table import HoodieTable


def _timeline(args) -> int:
    t = HoodieTable.open(args.path)
    tl = t.timeline
    rows = []
    for i in tl.instants:
        completion = tl.completion_time(i) if i.is_completed else ""
        op = ""
        if i.is_completed and i.action in ("commit", "deltacommit", "replacecommit"):
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

    t = HoodieTable.open(args.path)
    if args.instant:
        inst = t.timeline.get(args.instant)
        if inst is None:
            print(f"no instant {args.instant} on the timeline of {t.base_path}", file=sys.stderr)
            return 2
        if inst.is_completed:
            print(f"instant {args.instant} is completed; only pending writes can be rolled back", file=sys.stderr)
            return 2
        files = rollback_instant(t, inst)
        print(f"rolled back {args.instant}: {len(files)} file(s) deleted")
    else:
        done = rollback_failed_writes(t)
        print(f"rolled back {len(done)} pending instant(s): {', '.join(done) or '-'}")
    return 0


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="hudilite", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("timeline", help="list the instants of a table")
    s.add_argument("path")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_timeline)
    s = sub.add_parser("rollback", help="roll back pending (failed) writes")
    s.add_argument("path")
    s.add_argument("instant", nargs="?")
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
