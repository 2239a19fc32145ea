"""Table services: rollback, compaction, clean, clustering, archival (see docs/services.md).

Run modes:
- inline: after a successful write, `WriteClient.run` calls `services.inline.run_inline_services` with the write's
  options;
- async: `hoodie.compact.schedule.inline=true` / `hoodie.clustering.schedule.inline=true` only schedule the plan
  after a write; `hudilite compaction run PATH` / `hudilite cluster PATH` (or the Python functions) execute it;
- standalone: the `hudilite` command line or the functions of the service modules.
Every service takes its instants through `Transaction.start` (plan decided under the table lock) and completes
them under the lock, so services and writers on one table coordinate through the lock and the timeline. A
compaction or clustering plan is executed by the holder of its claim only (services/claim.py): inline services
skip a plan another executor holds, the command line waits for it.
"""
