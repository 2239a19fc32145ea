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
`--table-versions 6,9`: every hudilite system above at each table version (`hudilite_mor_v6`, `hudilite_mor_v9`,
...), the versions of a system next to each other in each repetition, their order reversed on odd repetitions;
the ratios then come per version, followed by version 9 / version 6 for every hudilite step.
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


def plan_for(versions: list[str]) -> tuple[list[tuple[str, list[str]]], list[list[str]]]:
    """PLAN with each hudilite system at every table version (`<name>_v<version>`, the versions of one
    system next to each other), and the groups of those versioned names; PLAN itself without versions."""
    if not versions:
        return list(PLAN), []
    plan, groups = [], []
    for name, steps in PLAN:
        if not issubclass(brun.CLASSES[name], brun.Hudilite):
            plan.append((name, steps))
            continue
        group = [brun.versioned(brun.CLASSES[name], v) for v in versions]
        plan += [(n, steps) for n in group]
        groups.append(group)
    return plan, groups


def plan_ratios(summary: dict, versions: list[str]) -> list[dict]:
    """RATIOS (per table version when there are several), then each later version / the first one for
    every hudilite system and step."""
    out = []
    for v in versions or [None]:
        def sysname(n: str) -> str:
            return f"{n}_v{v}" if v and issubclass(brun.CLASSES[n], brun.Hudilite) else n

        for label, (an, ast), (bn, bst) in RATIOS:
            x = summary.get(sysname(an), {}).get(ast, {}).get("median_s")
            y = summary.get(sysname(bn), {}).get(bst, {}).get("median_s")
            out.append({"ratio": f"[v{v}] {label}" if v else label, "value": (x / y) if x and y else None})
    for name, _steps in PLAN:
        if issubclass(brun.CLASSES[name], brun.Hudilite):
            out += brun.version_ratios(summary, name, versions)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bdata.add_workload_args(p, repeat=1)
    p.add_argument("--warmup", choices=("full", "light", "none"), default="light")
    p.add_argument("--table-versions", default=None, metavar="LIST",
                   help="every hudilite system at these table versions (e.g. 6,9), interleaved in each repetition")
    a = p.parse_args(argv)
    versions = brun.parse_table_versions(a.table_versions)
    plan, groups = plan_for(versions)
    steps_of = dict(plan)

    w, exp, wd = bdata.stage_args(a)
    ctx = brun.Ctx(exp, dict(brun.SPARK_CONF), a.warmup)
    ctx.start_spark(wd)
    log = brun.CheckLog()
    raw: list[dict] = []
    ok = True
    for rep in range(a.repeat):
        for name in brun.interleaved([n for n, _ in plan], groups, rep):
            steps = steps_of[name]
            path = wd / "tables_mor" / name / f"rep{rep}"
            print(f"[{name}] rep {rep}: {' -> '.join(steps)}", flush=True)
            ok &= brun.run_system(ctx, name, steps, rep, path, log, raw)
            if "compaction" in steps and ok:
                sysobj = brun.CLASSES[name](ctx)
                sysobj.begin(path)
                log.check(name, rep, "checksums after compaction", exp["final"], sysobj.checksums())
            shutil.rmtree(path, ignore_errors=True)
    summary = brun.summarize(raw)
    ratios = plan_ratios(summary, versions)
    print("\n==== medians (s)")
    for s, steps in summary.items():
        print(f"  {s:20s} " + "  ".join(f"{st} {v['median_s']:.2f}" for st, v in steps.items()))
    print("\n==== ratios")
    for r in ratios:
        print(f"  {'n/a' if r['value'] is None else format(r['value'], '.2f') + 'x':>8s}  {r['ratio']}")
    bad = [c for c in log.rows if not c["ok"]]
    print(f"\n==== checks: {len(log.rows) - len(bad)}/{len(log.rows)} ok" + (f"; FAILED {bad}" if bad else ""))
    out = Path(a.out) if a.out else wd / "results_mor.json"
    out.write_text(json.dumps({"workload": w.__dict__, "table_versions": versions, "raw": raw, "summary": summary,
                               "ratios": ratios, "checks": log.rows, "time": time.time()}, indent=1, default=str))
    print(f"raw timings: {out}")
    ctx.spark.stop()
    return 0 if ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
