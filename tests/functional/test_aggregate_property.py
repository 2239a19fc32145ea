"""Property: random sequences of upstream upserts and deletes (group moves, null values, emptied groups), with
incremental aggregate refreshes in between, always leave the aggregate table equal to a full recomputation
(computed in plain Python from the reference state of the detail table). Seeded random (hypothesis is not
installed); HUDILITE_PROPERTY_SEQUENCES / _STEPS size the run."""

import os
import random

import pytest

import hudilite
from dbt.adapters.hudilite.aggregate import parse, refresh

SEQUENCES = int(os.environ.get("HUDILITE_PROPERTY_SEQUENCES", "10"))
STEPS = int(os.environ.get("HUDILITE_PROPERTY_STEPS", "3"))
SCHEMA = "id long, g string, x long, y long, _hoodie_is_deleted boolean"
QUERY = parse("""
select g, count(*) as n, count(x) as nx, sum(x) as s, avg(x) as a, min(x) as mn, max(x) as mx,
       count(distinct y) as dy
from `db`.`detail` d
where d.y <> 3
group by g
""")


# count/sum/avg of plain columns, no WHERE, two group keys (one may be null): folded in Arrow on the driver
# (aggregate.incremental_arrow) when the range is one upstream commit
FOLDED = parse("select g, y, count(*) as n, count(x) as nx, sum(x) as s, avg(x) as a from `db`.`detail` "
               "group by g, y")


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


@pytest.mark.parametrize("folded", [False, True])
@pytest.mark.parametrize("seed", range(SEQUENCES))
def test_incremental_aggregate_equals_full_recomputation(spark, tmp_path, seed, folded, monkeypatch):
    from dbt.adapters.hudilite import aggregate

    query, want, got = (FOLDED, expected_folded, actual_folded) if folded else (QUERY, expected, actual)
    local_runs = []
    arrow = aggregate.incremental_arrow
    monkeypatch.setattr(aggregate, "incremental_arrow", lambda *a: local_runs.append(arrow(*a)) or local_runs[-1])
    rng = random.Random(seed)
    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    state: dict = {}
    first = batch(rng, state, 12)
    hudilite.write(spark.createDataFrame(first, SCHEMA), detail, record_key="id")
    refresh(spark, query, detail, agg)
    assert same(got(spark, agg), want(state)), f"seed {seed}: full build"
    for step in range(STEPS):
        rows = batch(rng, state, rng.randrange(1, 8))
        if rows:
            hudilite.write(spark.createDataFrame(rows, SCHEMA), detail, record_key="id")
        more = None
        if rng.random() < 0.3 and rows:  # two upstream commits between refreshes
            more = batch(rng, state, 3)
            if more:
                hudilite.write(spark.createDataFrame(more, SCHEMA), detail, record_key="id")
        single = bool(rows) and not more
        runs = len(local_runs)
        c = refresh(spark, query, detail, agg)
        # which engine folded the step: Arrow for one upstream commit of the folded query, Spark otherwise
        assert (local_runs[runs] is not None if len(local_runs) > runs else False) == (folded and single)
        assert same(got(spark, agg), want(state)), f"seed {seed} step {step} (commit {c})"
    # re-running the same (now empty) range changes nothing
    before = got(spark, agg)
    assert refresh(spark, query, detail, agg) is None
    assert got(spark, agg) == before
