"""Merge-on-read benchmark: MOR upsert, merged snapshot read and compaction beside the COW numbers and the
delta-rs merge, in one process and one run (the workload, staging, systems and checks of bench/run.py).

    python -m bench.mor --n 1000000 --b 100000 --repeat 1

Per repetition, fresh tables:
    hudilite       COW:  bulk_insert load -> upsert -> snapshot scan + agg            (bench/run.py's system)
    hudilite_mor   MOR:  bulk_insert load -> upsert (log blocks, and the overlay entries of the slice states it
                         makes: the default) -> merged snapshot scan + agg (the first read: finds them) -> the same
                         scan again -> compaction (schedule + execute) -> snapshot scan + agg of the compacted table
    hudilite_mor_lazy    the same with hoodie.write.read.overlays=false: load -> upsert (log blocks only) -> merged
                         snapshot scan + agg (computes and writes the overlay files) -> the same scan again
    delta          delta-rs: load -> merge                                            (bench/run.py's system)
Checks (untimed, as bench/run.py): checksums after load and upsert, the scan aggregate, and the checksums
after the compaction, all against the staged expectations.
Ratios: MOR upsert / delta-rs merge (target <= 0.5), MOR merged snapshot / COW snapshot (target <= 1.5), the
scan again, the upsert and first scan without write-time overlay entries, MOR upsert / COW upsert, compaction /
COW upsert.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench import data as bdata
from bench import run as brun


class HudiliteMOR(brun.Hudilite):
    name = "hudilite_mor"
    KW = dict(brun.Hudilite.KW, table_type="MERGE_ON_READ")

    def compaction(self):
        import hudilite

        services = hudilite.Table.open(str(self.path)).services
        c = services.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
        done = services.run_compaction()
        return {"instant": c, "completed": done}

    def checksums(self) -> dict:
        """Untimed checks read without overlay files (neither reading nor writing any)."""
        from hudilite.reader import overlay_cache

        self.ctx.spark.conf.set(overlay_cache.CONF, "false")
        try:
            return super().checksums()
        finally:
            self.ctx.spark.conf.unset(overlay_cache.CONF)

    def scan_again(self):
        """The merged scan again: it finds the overlay files the first scan wrote."""
        return self.scan()

    def scan_compacted(self):
        return self.scan()


class HudiliteMORLazy(HudiliteMOR):
    """MOR with `hoodie.write.read.overlays=false`: the upsert writes log blocks only; the first merged scan
    computes the overlay files, the second finds them."""

    name = "hudilite_mor_lazy"
    KW = dict(HudiliteMOR.KW, options={"hoodie.write.read.overlays": "false"})


brun.CLASSES["hudilite_mor"] = HudiliteMOR
brun.CLASSES["hudilite_mor_lazy"] = HudiliteMORLazy
PLAN = [
    ("hudilite", ["load", "upsert", "scan"]),
    ("hudilite_mor", ["load", "upsert", "scan", "scan_again", "compaction", "scan_compacted"]),
    ("hudilite_mor_lazy", ["load", "upsert", "scan", "scan_again"]),
    ("delta", ["load", "upsert"]),
]
RATIOS = [
    ("MOR upsert / delta-rs merge (target <= 0.5)", ("hudilite_mor", "upsert"), ("delta", "upsert")),
    ("MOR merged snapshot scan / COW snapshot scan (target <= 1.5)", ("hudilite_mor", "scan"), ("hudilite", "scan")),
    ("MOR merged scan again / COW snapshot scan", ("hudilite_mor", "scan_again"), ("hudilite", "scan")),
    ("MOR upsert without write-time overlays / delta-rs merge", ("hudilite_mor_lazy", "upsert"),
     ("delta", "upsert")),
    ("its first merged scan (computes the overlays) / COW snapshot scan", ("hudilite_mor_lazy", "scan"),
     ("hudilite", "scan")),
    ("its merged scan again / COW snapshot scan", ("hudilite_mor_lazy", "scan_again"), ("hudilite", "scan")),
    ("MOR upsert / COW upsert", ("hudilite_mor", "upsert"), ("hudilite", "upsert")),
    ("COW upsert / delta-rs merge", ("hudilite", "upsert"), ("delta", "upsert")),
    ("compaction / COW upsert", ("hudilite_mor", "compaction"), ("hudilite", "upsert")),
    ("compacted snapshot scan / COW snapshot scan", ("hudilite_mor", "scan_compacted"), ("hudilite", "scan")),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bdata.add_workload_args(p, repeat=1)
    p.add_argument("--warmup", choices=("full", "light", "none"), default="light")
    a = p.parse_args(argv)

    w, exp, wd = bdata.stage_args(a)
    ctx = brun.Ctx(exp, dict(brun.SPARK_CONF), a.warmup)
    ctx.start_spark(wd)
    log = brun.CheckLog()
    raw: list[dict] = []
    ok = True
    for rep in range(a.repeat):
        for name, steps in PLAN:
            path = wd / "tables_mor" / name / f"rep{rep}"
            print(f"[{name}] rep {rep}: {' -> '.join(steps)}", flush=True)
            ok &= brun.run_system(ctx, name, steps, rep, path, log, raw)
            if name == "hudilite_mor" and ok:
                sysobj = HudiliteMOR(ctx)
                sysobj.begin(path)
                log.check(name, rep, "checksums after compaction", exp["final"], sysobj.checksums())
            shutil.rmtree(path, ignore_errors=True)
    summary = brun.summarize(raw)
    ratios = []
    for label, (an, ast), (bn, bst) in RATIOS:
        x = summary.get(an, {}).get(ast, {}).get("median_s")
        y = summary.get(bn, {}).get(bst, {}).get("median_s")
        ratios.append({"ratio": label, "value": (x / y) if x and y else None})
    print("\n==== medians (s)")
    for s, steps in summary.items():
        print(f"  {s:14s} " + "  ".join(f"{st} {v['median_s']:.2f}" for st, v in steps.items()))
    print("\n==== ratios")
    for r in ratios:
        print(f"  {'n/a' if r['value'] is None else format(r['value'], '.2f') + 'x':>8s}  {r['ratio']}")
    bad = [c for c in log.rows if not c["ok"]]
    print(f"\n==== checks: {len(log.rows) - len(bad)}/{len(log.rows)} ok" + (f"; FAILED {bad}" if bad else ""))
    out = Path(a.out) if a.out else wd / "results_mor.json"
    out.write_text(json.dumps({"workload": w.__dict__, "raw": raw, "summary": summary, "ratios": ratios,
                               "checks": log.rows, "time": time.time()}, indent=1, default=str))
    print(f"raw timings: {out}")
    ctx.spark.stop()
    return 0 if ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
