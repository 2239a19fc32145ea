"""Table services: rollback now; compaction, clean, clustering and archival build on the same timeline."""
