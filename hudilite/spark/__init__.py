"""The Spark engine: reads (native parquet scans plus merged log overlays), the `hudilite` data source and
change queries as DataFrames. The format, planning and merge logic it drives is engine-free (hudilite.reader,
hudilite.writer); the driver-local Arrow writer (hudilite.writer.local) is the other engine."""
