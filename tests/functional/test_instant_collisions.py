"""The birthday effect of local-clock instant times (issue 24), at a test's scale: processes taking
millisecond timestamps from their own clocks collide; hudilite's instants (table lock + put-if-absent) never do.
`python -m bench.instant_collisions` runs the published scale, 16 processes x 200 commits (bench/README.md)."""

import pytest

from bench.instant_collisions import check_hudilite, run


@pytest.mark.slow
def test_local_clock_instants_collide_and_ours_never_do(tmp_path):
    procs, commits = 8, 20
    naive = run(str(tmp_path), "naive", procs, commits)
    ours = run(str(tmp_path), "hudilite", procs, commits)
    print(f"\n{procs} x {commits}: local clock {naive['collisions']} shared instant times, "
          f"{naive['total'] - naive['intact']} commits lost; hudilite {ours['collisions']}")
    assert naive["collisions"] > 0 and naive["intact"] < naive["total"]
    assert check_hudilite(ours) == []
    assert ours["collisions"] == 0 and ours["intact"] == ours["total"] == procs * commits
