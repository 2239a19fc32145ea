"""Profile of `type: hudilite`.

    my_project:
      target: dev
      outputs:
        dev:
          type: hudilite
          schema: analytics          # the Spark database models are built in
          warehouse: warehouse       # tables live in <warehouse>/<schema>/<identifier>; relative paths are
                                     # relative to the dbt project directory (default: <project>/warehouse);
                                     # or on object storage: s3://bucket/prefix (docs/storage.md)
          storage_options: {}        # s3:// warehouses: endpoint, region, access_key_id, ... (the keys of
                                     # hudilite.write(storage_options=); left out: the AWS environment)
          metastore_dir: ...         # the local catalog (Derby metastore, lock, Spark log); default
                                     # <warehouse>/.metastore, for an s3:// warehouse <project>/warehouse/.metastore
          master: "local[*]"         # any Spark master URL (spark://host:7077, yarn, ...)
          spark_conf: {}             # extra Spark settings for the session
          spark_logs: false          # true: Spark's own log on the console (else <warehouse>/.metastore/spark.log)
          method: session            # session: an embedded SparkSession (the default); connect: a Spark
                                     # Connect server (`hudilite server start --warehouse DIR`, or a cluster's)
          host: sc://127.0.0.1:15002 # method connect: the server's URL (sc://host:port[/;param=value...])
          token: ...                 # method connect: a bearer token (sent as the URL's token parameter)
          use_ssl: false             # method connect: TLS to the server
          threads: 4
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Tuple

from dbt.adapters.contracts.connection import Credentials
from dbt.flags import get_flags
from dbt_common.exceptions import DbtRuntimeError

from hudilite.server import redact_url
from hudilite.storage import is_local, normalize_path, registered_storage, scheme_of


@dataclass
class HudiliteCredentials(Credentials):
    schema: Optional[str] = None  # type: ignore[assignment]  # required (checked below)
    database: Optional[str] = None  # type: ignore[assignment]  # Spark: database == schema
    warehouse: Optional[str] = None
    # how to reach an object-store warehouse (hudilite.storage.bind_storage_options); may hold credentials
    storage_options: Dict[str, Any] = field(default_factory=dict)
    metastore_dir: Optional[str] = None
    master: str = "local[*]"
    spark_conf: Dict[str, Any] = field(default_factory=dict)
    # Reuse a SparkSession already running in this process (notebooks, tests) instead of building one.
    # "auto": reuse when one exists; "never": fail if one exists that hudilite did not build.
    reuse_session: str = "auto"
    # Spark's own log (log4j) on the console as well as dbt's; HUDILITE_SPARK_LOGS=1 turns it on too.
    spark_logs: bool = False
    user: Optional[str] = None
    method: str = "session"
    host: Optional[str] = None
    token: Optional[str] = None
    use_ssl: bool = False

    _ALIASES = {"spark_config": "spark_conf", "conf": "spark_conf", "warehouse_path": "warehouse"}

    @classmethod
    def __pre_deserialize__(cls, data: Any) -> Any:
        data = super().__pre_deserialize__(data)
        data.setdefault("database", None)
        return data

    def __post_init__(self) -> None:
        if not self.schema:
            raise DbtRuntimeError("hudilite profile: `schema` is required")
        if self.database is not None and self.database != self.schema:
            raise DbtRuntimeError(
                f"hudilite profile: database ({self.database}) and schema ({self.schema}) must be equal or "
                "database omitted: on Spark a database is a schema")
        self.database = None
        if self.reuse_session not in ("auto", "never"):
            raise DbtRuntimeError("hudilite profile: `reuse_session` must be 'auto' or 'never'")
        if self.method not in ("session", "connect"):
            raise DbtRuntimeError(f"hudilite profile: `method` must be 'session' or 'connect', not {self.method!r}")
        if self.method == "connect" and not self.host:
            raise DbtRuntimeError("hudilite profile: method connect needs `host: sc://host:port` (a local server: "
                                  "`hudilite server start --warehouse DIR` listens on sc://127.0.0.1:15002)")
        self.spark_conf = {str(k): str(v) for k, v in (self.spark_conf or {}).items()}
        self.storage_options = {str(k): v for k, v in (self.storage_options or {}).items()}

    @property
    def type(self) -> str:
        return "hudilite"

    @property
    def unique_field(self) -> str:
        return self.warehouse or "warehouse"

    def _connection_keys(self) -> Tuple[str, ...]:
        return ("schema", "warehouse", "storage_options", "method", "host", "master", "spark_conf")

    def connection_info(self, *, with_aliases: bool = False) -> Iterable[Tuple[str, Any]]:
        for k, v in super().connection_info(with_aliases=with_aliases):
            if k == "warehouse":
                v = self.resolve_warehouse(None)
            elif k == "storage_options":
                v = redacted(v)
            elif k == "host" and isinstance(v, str):  # a token may ride in the URL's parameters
                v = redact_url(v)
            yield k, v
        try:
            import pyspark

            yield "spark_version", pyspark.__version__
        except ImportError:  # pragma: no cover - pyspark is a dependency
            yield "spark_version", "pyspark is not installed"

    @property
    def show_spark_logs(self) -> bool:
        env = os.environ.get("HUDILITE_SPARK_LOGS", "").strip().lower()
        if env:
            return env in ("1", "true", "yes", "on")
        return bool(self.spark_logs)

    def resolve_warehouse(self, project_root: Optional[str]) -> str:
        """Absolute warehouse directory (relative paths are relative to the dbt project directory), or the
        normalized URI of a warehouse on a scheme with a storage backend (`s3://bucket/prefix`)."""
        root = project_root or project_dir_hint()
        wh = self.warehouse or "warehouse"
        scheme = scheme_of(wh)
        if scheme not in ("", "file"):
            if registered_storage(scheme) is None:
                hint = (" (install the `s3` extra: pip install 'hudilite[s3]')" if scheme in ("s3", "s3a")
                        else "")
                raise DbtRuntimeError(
                    f"hudilite profile: warehouse {wh!r}: no storage backend for {scheme}:// paths{hint}; "
                    "supported: local (or locally mounted) paths, s3:// and s3a://")
            return normalize_path(wh)
        if self.storage_options:
            raise DbtRuntimeError(
                f"hudilite profile: storage_options apply to an object-store warehouse (s3://...), not to the "
                f"local warehouse {wh!r}")
        if wh.startswith("file://"):
            wh = wh[len("file://"):]
        wh = os.path.expanduser(wh)
        if not os.path.isabs(wh):
            wh = os.path.join(root, wh)
        return os.path.normpath(wh)

    def resolve_metastore_dir(self, warehouse: str, project_root: Optional[str]) -> str:
        """The local directory of the catalog (Derby metastore, warehouse lock, Spark's log): `metastore_dir`,
        else `<warehouse>/.metastore`; an object-store warehouse keeps it in `<project>/warehouse/.metastore`
        (Derby and the lock need a local file system)."""
        root = project_root or project_dir_hint()
        if self.metastore_dir:
            d = os.path.expanduser(self.metastore_dir)
            return os.path.normpath(d if os.path.isabs(d) else os.path.join(root, d))
        if is_local(warehouse):
            return os.path.join(warehouse, ".metastore")
        return os.path.join(root, "warehouse", ".metastore")


# storage options shown as they are in `dbt debug` and logs; every other value (keys, secrets, tokens) is masked
_PLAIN_OPTIONS = frozenset({"endpoint", "endpoint_url", "aws_endpoint", "region", "aws_region", "path_style",
                            "aws_virtual_hosted_style_request", "allow_http", "aws_allow_http", "max_retries",
                            "retry_timeout_s", "backoff_init_ms", "backoff_max_ms"})


def redacted(options: Any) -> Any:
    """`storage_options` fit for logs: credentials (any key not known to be harmless) replaced by '***'."""
    if not isinstance(options, dict):
        return options
    return {k: (v if str(k).lower() in _PLAIN_OPTIONS else "***") for k, v in options.items()}


def project_dir_hint() -> str:
    """The dbt project directory of this invocation (--project-dir / DBT_PROJECT_DIR / the working directory)."""
    try:
        d = getattr(get_flags(), "PROJECT_DIR", None)
        if d:
            return os.path.abspath(str(d))
    except Exception:  # noqa: BLE001 - outside dbt-core (adapter used as a library)
        pass
    return os.getcwd()
