"""Property: random sequences of upstream upserts and deletes (group moves, null values, emptied groups), with
incremental aggregate refreshes in between, always leave the aggregate table equal to a full recomputation
(computed in plain Python from the reference state of the detail table). Seeded random (hypothesis is not
installed); HUDILITE_PROPERTY_SEQUENCES / _STEPS size the run.

CI runs a fixed sample: 3 sequences (seeds 0-2, so every min / max buffer size, 1-3 values, is drawn) of every
variant; the full run (HUDILITE_FULL=1, tests/sampling.py) draws 30."""

import random

import pyarrow as pa
import pytest

import hudilite
from hudilite.aggregate import parse, refresh
from tests.sampling import size

SEQUENCES = size("HUDILITE_PROPERTY_SEQUENCES", 3, 30)
STEPS = size("HUDILITE_PROPERTY_STEPS", 3, 3)
SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("x", pa.int64()), ("y", pa.int64()),
                    ("_hoodie_is_deleted", pa.bool_())])


def detail_rows(rows) -> pa.Table:
    """Detail batches as Arrow: written on the driver (hudilite/writer/local.py, change images included), not
    through a Spark job each: the refreshes are what these tests exercise."""
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)
QUERY = parse("""
select g, count(*) as n, count(x) as nx, sum(x) as s, avg(x) as a, min(x) as mn, max(x) as mx,
       count(distinct y) as dy
from `db`.`detail` d
where d.y <> 3
group by g
""")
# the same query with a WHERE clause the driver-local fold does not translate (an expression): always Spark
SPARK_QUERY = parse("""
select g, count(*) as n, count(x) as nx, sum(x) as s, avg(x) as a, min(x) as mn, max(x) as mx,
       count(distinct y) as dy
from `db`.`detail` d
where d.y + 0 <> 3
group by g
""")


# count/sum/avg of plain columns, no WHERE, two group keys (one may be null): folded in Arrow on the driver
# (hudilite.aggregate.local.incremental_arrow) when the range is one upstream commit
FOLDED = parse("select g, y, count(*) as n, count(x) as nx, sum(x) as s, avg(x) as a from `db`.`detail` "
               "group by g, y")


# min / max / count(distinct) of plain columns, no WHERE: in Arrow too, folded through value multisets
# (agg_state: min/max buffers, count(distinct) multisets). EXTREMES: integer min/max; DISTINCT: string min,
# count distinct with nulls, a null group key
EXTREMES = parse("select g, count(*) as n, min(x) as mn, max(x) as mx, max(y) as my from `db`.`detail` group by g")
DISTINCT = parse("select y, count(*) as n, min(g) as mg, count(distinct g) as dg, count(distinct x) as dx "
                 "from `db`.`detail` group by y")


def _reference(state: dict, key, aggs) -> dict:
    groups: dict = {}
    for g, x, y in state.values():
        groups.setdefault(key(g, x, y), []).append((g, x, y))
    return {k: tuple(f(rows) for f in aggs) for k, rows in groups.items()}


def _min(vals):
    vals = [v for v in vals if v is not None]
    return min(vals) if vals else None


def _max(vals):
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def expected_extremes(state: dict) -> dict:
    return _reference(state, lambda g, x, y: g, [len, lambda r: _min(x for _, x, _ in r),
                                                 lambda r: _max(x for _, x, _ in r), lambda r: _max(y for *_, y in r)])


def expected_distinct(state: dict) -> dict:
    return _reference(state, lambda g, x, y: y, [len, lambda r: _min(g for g, _, _ in r),
                                                 lambda r: len({g for g, _, _ in r} - {None}),
                                                 lambda r: len({x for _, x, _ in r} - {None})])


def actual_extremes(spark, path) -> dict:
    return {r["g"]: (r["n"], r["mn"], r["mx"], r["my"]) for r in hudilite.read(spark, path).collect()}


def actual_distinct(spark, path) -> dict:
    return {r["y"]: (r["n"], r["mg"], r["dg"], r["dx"]) for r in hudilite.read(spark, path).collect()}


VARIANTS = {"spark": (SPARK_QUERY, "expected", "actual"), "where": (QUERY, "expected", "actual"),
            "folded": (FOLDED, "expected_folded", "actual_folded"),
            "extremes": (EXTREMES, "expected_extremes", "actual_extremes"),
            "distinct": (DISTINCT, "expected_distinct", "actual_distinct")}


def expected(state: dict) -> dict:
    groups: dict = {}
    for g, x, y in state.values():
        if y != 3:
            groups.setdefault(g, []).append((x, y))
    out = {}
    for g, rows in groups.items():
        xs = [x for x, _ in rows if x is not None]
        out[g] = (len(rows), len(xs), sum(xs) if xs else None, (sum(xs) / len(xs)) if xs else None,
                  min(xs) if xs else None, max(xs) if xs else None, len({y for _, y in rows}))
    return out


def expected_folded(state: dict) -> dict:
    groups: dict = {}
    for g, x, y in state.values():
        groups.setdefault((g, y), []).append(x)
    out = {}
    for k, xs_all in groups.items():
        xs = [x for x in xs_all if x is not None]
        out[k] = (len(xs_all), len(xs), sum(xs) if xs else None, (sum(xs) / len(xs)) if xs else None)
    return out


def actual_folded(spark, path) -> dict:
    return {(r["g"], r["y"]): (r["n"], r["nx"], r["s"], r["a"]) for r in hudilite.read(spark, path).collect()}


def actual(spark, path) -> dict:
    return {r["g"]: (r["n"], r["nx"], r["s"], r["a"], r["mn"], r["mx"], r["dy"])
            for r in hudilite.read(spark, path).collect()}


def same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        for u, v in zip(a[k], b[k]):
            if isinstance(u, float) or isinstance(v, float):
                if u is None or v is None or abs(u - v) > 1e-9:
                    return False
            elif u != v:
                return False
    return True


def batch(rng: random.Random, state: dict, size: int):
    rows = []
    for _ in range(size):
        ids = list(state)
        if ids and rng.random() < 0.3:  # delete
            k = rng.choice(ids)
            if any(r[0] == k for r in rows):
                continue
            g, x, y = state.pop(k)
            rows.append((k, g, x, y, True))
            continue
        k = rng.choice(ids) if ids and rng.random() < 0.5 else rng.randrange(1000)
        if any(r[0] == k for r in rows):
            continue  # one event per key per batch (the reference applies them in order)
        v = (rng.choice(["a", "b", "c", "d", None]), None if rng.random() < 0.15 else rng.randrange(-5, 20), rng.randrange(5))
        state[k] = v
        rows.append((k, *v, False))
    return rows


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("seed", range(SEQUENCES))
def test_incremental_aggregate_equals_full_recomputation(spark, tmp_path, seed, variant, monkeypatch):
    from hudilite.aggregate import local, state as agg_state

    # small min / max buffers (1-3 values per group), so that refreshes empty them and trim them
    monkeypatch.setattr(agg_state, "BUFFER", 1 + seed % 3)
    query, want, got = VARIANTS[variant]
    want, got = globals()[want], globals()[got]
    local_runs = []
    arrow = local.incremental_arrow
    monkeypatch.setattr(local, "incremental_arrow", lambda *a: local_runs.append(arrow(*a)) or local_runs[-1])
    rng = random.Random(seed)
    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    state: dict = {}
    first = batch(rng, state, 12)
    hudilite.write(detail_rows(first), detail, record_key="id")
    refresh(spark, query, detail, agg)
    assert same(got(spark, agg), want(state)), f"seed {seed}: full build"
    for step in range(STEPS):
        rows = batch(rng, state, rng.randrange(1, 8))
        if rows:
            hudilite.write(detail_rows(rows), detail, record_key="id")
        more = None
        if rng.random() < 0.3 and rows:  # two upstream commits between refreshes
            more = batch(rng, state, 3)
            if more:
                hudilite.write(detail_rows(more), detail, record_key="id")
        single = bool(rows) and not more
        runs = len(local_runs)
        c = refresh(spark, query, detail, agg)
        # which engine folded the step: Arrow for one upstream commit (a WHERE clause it translates), else Spark
        assert (local_runs[runs] is not None if len(local_runs) > runs else False) == (variant != "spark" and single)
        assert same(got(spark, agg), want(state)), f"seed {seed} step {step} (commit {c})"
    # re-running the same (now empty) range changes nothing
    before = got(spark, agg)
    assert refresh(spark, query, detail, agg) is None
    assert got(spark, agg) == before


class Steps:
    """A detail table changed step by step (rows (id, g, x, y); deletes by id) beside its reference state,
    and the aggregate refreshed and compared with the reference after each step."""

    def __init__(self, spark, tmp_path, query, want, got):
        self.spark, self.query, self.want, self.got = spark, query, want, got
        self.detail, self.agg = str(tmp_path / "detail"), str(tmp_path / "agg")
        self.state: dict = {}

    def write(self, batch, deleted=()):
        out = [(*r, False) for r in batch] + [(k, *self.state.pop(k), True) for k in deleted]
        hudilite.write(detail_rows(out), self.detail, record_key="id")
        self.state.update({k: (g, x, y) for k, g, x, y in batch})

    def refresh(self):
        refresh(self.spark, self.query, self.detail, self.agg)
        got = self.got(self.spark, self.agg)
        assert got == self.want(self.state)
        return got

    def step(self, batch, deleted=()):
        self.write(batch, deleted)
        return self.refresh()


def test_extremes_read_the_detail_only_for_emptied_buffers(spark, tmp_path, monkeypatch):
    """min/max fold in Arrow through per-group buffers of the smallest / largest values (here 2): changes
    beyond a buffer's bound are ignored, changes within it applied; only a group whose buffer a refresh
    empties is read again from the detail snapshot (spy on the snapshot reads)."""
    from hudilite.aggregate import local, state as agg_state

    monkeypatch.setattr(agg_state, "BUFFER", 2)
    reads = []
    real = local._snapshot_states
    monkeypatch.setattr(local, "_snapshot_states", lambda plan, d, e, items, groups=None: reads.append(
        None if groups is None else sorted(groups.column("__k0").to_pylist())) or real(plan, d, e, items, groups))
    t = Steps(spark, tmp_path, EXTREMES, expected_extremes, actual_extremes)
    t.step([(1, "a", 1, 0), (2, "a", 5, 1), (3, "a", 9, 2), (4, "b", 2, 0), (5, "b", 4, 1), (6, "b", 6, 2)])
    assert reads == [None]  # the full build's buffers, from the whole snapshot
    # a: 5 -> 3 (min buffer {1, 5} -> {1, 3}); b: its min 2 leaves
    assert t.step([(2, "a", 3, 1), (4, "b", 10, 0)])["b"] == (3, 4, 10, 2)
    assert t.step([(7, "a", 0, 1), (8, "c", 7, 2)])["a"] == (4, 0, 9, 2)  # a's min extended; a new group
    assert reads == [None], "no buffer emptied: nothing read from the detail"
    # b's min buffer {4} empties (min 4 leaves; 6 and 10 were beyond its bound): b's rows read again
    assert t.step([], deleted=[5])["b"] == (2, 6, 10, 2)
    assert reads == [None, ["b"]]
    # c keeps a row whose values are null: min/max null
    assert t.step([(9, "c", None, None)], deleted=[8])["c"] == (1, None, None, None)


def test_distinct_state_folds_without_reading_the_detail(spark, tmp_path, monkeypatch):
    """count(distinct) keeps a (group, value) multiset beside the aggregate table: built from the detail
    snapshot by the full build (and by a driver-local refresh that finds no usable stored state), then folded
    from the change images alone (spy on the snapshot reads); old state files are removed."""
    import os

    from hudilite.aggregate import local, state as agg_state

    reads = []  # snapshot reads of the state's columns (min(g)'s recomputations read g and y only)
    real = local.local_snapshot
    monkeypatch.setattr(local, "local_snapshot",
                        lambda *a, **k: (reads.append(a[2]) if "x" in a[2] else None) or real(*a, **k))
    t = Steps(spark, tmp_path, DISTINCT, expected_distinct, actual_distinct)
    state_dir = os.path.join(t.agg, agg_state.DIR)
    t.step([(1, "a", 1, 0), (2, "a", 5, 1), (3, "b", 1, 0), (4, None, 2, 1), (5, "b", None, 2)])
    # the full build also builds the state, from the snapshot: a file per min / count(distinct) item
    assert len(reads) == 1 and len(os.listdir(state_dir)) == 3
    first = set(os.listdir(state_dir))
    t.step([(6, "c", 1, 0), (2, "b", 5, 1)])
    t.step([(7, "a", 9, 0), (3, "a", 1, 0)], deleted=[6])  # 'c' leaves group 0, x=1 stays held by key 1 and 3
    t.step([(8, None, 5, 1)], deleted=[2, 4])  # group 1 keeps x=5 (key 8) and gains a null g
    assert len(reads) == 1, "a stored state must be folded, not rebuilt from the detail"
    # the files of this commit and of the one before it (current until this one committed) stay; older go
    assert len(os.listdir(state_dir)) == 6 and not first & set(os.listdir(state_dir))
    # an unusable stored state (here: truncated) is rebuilt from the snapshot, never trusted
    for f in os.listdir(state_dir):
        with open(os.path.join(state_dir, f), "r+b") as fh:
            fh.truncate(10)
    t.step([(9, "d", 3, 2)], deleted=[1])
    assert len(reads) == 2
    t.step([(10, "d", 4, 2)])
    assert len(reads) == 2
    # a refresh through Spark (two upstream commits) keeps no state: the next driver-local one rebuilds it
    t.write([(11, "a", 1, 0)])
    t.step([(12, "e", 1, 3)], deleted=[10])
    t.step([(13, "e", 2, 3)])
    assert len(reads) == 3
