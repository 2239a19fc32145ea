"""The `hudilite` dbt adapter: dbt-spark's SQL behaviour, hudilite tables for every model that stores data.

Thin: catalog introspection comes from dbt-spark (`SparkAdapter`), the work is done by the
process-wide :class:`~dbt.adapters.hudilite.environment.HudiliteEnvironment` that the connection manager
holds. Macros reach it through the `@available` methods below.
"""

from __future__ import annotations

import getpass
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from dbt.adapters.base.impl import ConstraintSupport, log_code_execution
from dbt.adapters.base.meta import available
from dbt.adapters.capability import Capability, CapabilityDict, CapabilitySupport, Support
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from dbt_common.contracts.constraints import ConstraintType
from dbt_common.exceptions import DbtRuntimeError
from typing_extensions import TypeAlias

from dbt.adapters.hudilite.aggregate import materialize_aggregate
from dbt.adapters.hudilite.audit import set_publish_options
from dbt.adapters.hudilite.clone import clone_table
from dbt.adapters.hudilite.connections import HudiliteConnectionManager
from dbt.adapters.hudilite.incremental import changes_relation, read_relation
from dbt.adapters.hudilite.model_config import is_hidden_column
from dbt.adapters.hudilite.python_model import run_script
from dbt.adapters.hudilite.relation import HudiliteRelation

logger = AdapterLogger("Hudilite")


@dataclass
class HudiliteConfig(SparkConfig):
    precombine_field: Optional[str] = None
    table_type: Optional[str] = None
    delete_condition: Optional[str] = None
    merge_exclude_columns: Optional[Union[List[str], str]] = None
    tblproperties: Optional[Dict[str, str]] = None
    microbatch_source: Optional[str] = None  # 'changes': batches from the upstreams' commits (change_batches.py)


class HudiliteAdapter(SparkAdapter):
    ConnectionManager: TypeAlias = HudiliteConnectionManager  # type: ignore[assignment]
    Relation: TypeAlias = HudiliteRelation  # type: ignore[assignment]
    AdapterSpecificConfigs: TypeAlias = HudiliteConfig  # type: ignore[assignment]
    # microbatch batches of one model may run on several threads: each is one commit under the core's
    # optimistic concurrency (dbt/adapters/hudilite/microbatch.py)
    _capabilities = CapabilityDict({Capability.MicrobatchConcurrency: CapabilitySupport(support=Support.Full)})

    # not_null is checked on the model's rows before the commit (materialize.py); the others are recorded as
    # table properties (hudilite_constraints.sql), as dbt-spark records CHECK constraints on Delta tables
    CONSTRAINT_SUPPORT = {
        ConstraintType.check: ConstraintSupport.NOT_ENFORCED,
        ConstraintType.not_null: ConstraintSupport.ENFORCED,
        ConstraintType.unique: ConstraintSupport.NOT_ENFORCED,
        ConstraintType.primary_key: ConstraintSupport.NOT_ENFORCED,
        ConstraintType.foreign_key: ConstraintSupport.NOT_ENFORCED,
    }

    def __init__(self, config, mp_context) -> None:
        super().__init__(config, mp_context)
        self._python_lock = threading.Lock()
        self._python_models: Dict[str, Any] = {}  # unique_id -> (kind, cfg) of a Python model about to run

    @classmethod
    def type(cls) -> str:
        return "hudilite"

    @property
    def env(self):
        return self.connections.env

    # ---- introspection -----------------------------------------------------------------------
    def _build_spark_relation_list(self, row_list, relation_info_func):
        relations = []
        for row in row_list:
            _schema, name, information = relation_info_func(row)
            is_view = "Type: VIEW" in information
            # copy-on-write entries carry hudilite.* table properties; merge-on-read entries are tables of the
            # hudilite data source (their properties live in the schema, catalog.py)
            is_hudilite = "hudilite.path=" in information or "Provider: hudilite" in information
            relations.append(self.Relation.create(
                schema=_schema, identifier=name, type="view" if is_view else "table",
                information=information, is_delta="Provider: delta" in information,
                is_iceberg="Provider: iceberg" in information,
                is_hudi=is_hudilite or "Provider: hudi" in information, is_hudilite=is_hudilite,
            ))
        return relations

    def get_columns_in_relation(self, relation):
        cols = [c for c in super().get_columns_in_relation(relation) if not is_hidden_column(c.name)]
        for i, c in enumerate(cols):
            c.column_index = i
        return cols

    def parse_columns_from_information(self, relation):
        cols = [c for c in super().parse_columns_from_information(relation) if not is_hidden_column(c.name)]
        for i, c in enumerate(cols):
            c.column_index = i
        return cols

    def _get_columns_for_catalog(self, relation):
        """Docs catalog: the types `describe` reports (bigint, decimal(10,2), struct<...>), not the type names
        of SHOW TABLE EXTENDED's schema tree (long, decimal, struct)."""
        try:
            columns = self.get_columns_in_relation(relation)
        except Exception as e:  # noqa: BLE001
            logger.debug(f"columns of {relation} for the catalog: {e}")
            columns = self.parse_columns_from_information(relation)
        stats = self._snapshot_stats(relation) if getattr(relation, "is_hudilite", False) else None
        owner = None
        for column in columns:
            as_dict = column.to_column_dict()
            if stats is not None:
                # the metastore's statistics of the entry (a directory of links, or none) say nothing of the table
                as_dict = {k: v for k, v in as_dict.items() if not k.startswith("stats:")}
                as_dict.update(stats)
            as_dict["column_name"] = as_dict.pop("column", None)
            as_dict["column_type"] = as_dict.pop("dtype")
            as_dict["table_database"] = None
            if as_dict.get("table_owner") in (None, "", "None"):
                # Spark's in-memory catalog records no owner (and dbt-spark then reports the string "None"):
                # the relation was created by this profile's user (else: the OS user, as Hive records it)
                owner = owner or self.catalog_owner()
                as_dict["table_owner"] = owner
            yield as_dict

    def _snapshot_stats(self, relation) -> Optional[Dict[str, Any]]:
        try:
            return self.env.snapshot_stats(relation.schema, relation.identifier)
        except Exception as e:  # noqa: BLE001 - no statistics rather than no catalog
            logger.debug(f"statistics of {relation} for the catalog: {e}")
            return None

    def catalog_owner(self) -> str:
        user = getattr(self.config.credentials, "user", None)
        if user:
            return str(user)
        try:
            return getpass.getuser()
        except Exception:  # noqa: BLE001 - no user name in this environment
            return "unknown"

    def get_column_schema_from_query(self, sql: str):
        return [c for c in super().get_column_schema_from_query(sql) if not is_hidden_column(c.name)]

    def debug_query(self) -> None:
        self.execute("select 1 as id")
        logger.info(self.env.describe_session())

    @classmethod
    def _get_adapter_specific_run_info(cls, config) -> Dict[str, Any]:
        return {"adapter_type": "hudilite", "table_format": "hudi"}

    # ---- for macros --------------------------------------------------------------------------
    @available
    def hudilite_materialize(self, relation, compiled_code: str, kind: str, cfg: Dict[str, Any]):
        """Build (`kind` 'table', or 'incremental' first run / full refresh) or update the model's table: one
        hudilite commit, then the catalog entry points at the new snapshot. Returns the adapter response."""
        set_publish_options(self.env, relation.schema, relation.identifier, cfg)  # audit_before_publish, mark_ready
        return self.env.materialize(relation.schema, relation.identifier, compiled_code, kind, cfg)

    @available
    def hudilite_clone(self, relation, source):
        """`dbt clone`: the hudilite table `source` copied as the table `relation` (clone.py says why a copy)."""
        return clone_table(self.env, relation.schema, relation.identifier, source.schema, source.identifier)

    @available
    def hudilite_load_seed(self, relation, agate_table, cfg: Dict[str, Any]):
        overrides = {str(k).lower(): v for k, v in (cfg.get("column_types") or {}).items()}
        columns = [str(c) for c in agate_table.column_names]
        types = [overrides.get(c.lower()) or self.convert_type(agate_table, i) for i, c in enumerate(columns)]
        rows = [list(r) for r in agate_table.rows]
        return self.env.load_seed(relation.schema, relation.identifier, columns, types, rows, cfg)

    @available
    def hudilite_drop_relation(self, relation) -> None:
        self.env.drop_relation(relation.schema, relation.identifier, relation.type)

    @available
    def hudilite_create_schema(self, relation) -> None:
        self.env.create_schema(relation.schema)

    @available
    def hudilite_drop_schema(self, relation) -> None:
        self.env.drop_schema(relation.schema)

    @available
    def hudilite_table_path(self, relation) -> Optional[str]:
        return self.env.upstream_path(relation.schema, relation.identifier)

    @available
    def hudilite_visible_columns(self, names: List[str]) -> List[str]:
        return [n for n in names if not is_hidden_column(str(n))]

    @available
    def hudilite_session_info(self) -> str:
        return self.env.describe_session()

    # ---- Python models (python_model.py) ---------------------------------------------------------
    @available
    def hudilite_python_model_config(self, unique_id: str, kind: str, cfg: Dict[str, Any]) -> str:
        """Kept for submit_python_job: the materialization's kind and config of a Python model about to run (the
        config holds datetimes and other values a script's text would have to serialize)."""
        with self._python_lock:
            self._python_models[unique_id] = (kind, cfg)
        return ""

    @log_code_execution
    def submit_python_job(self, parsed_model: dict, compiled_code: str):
        """Run a Python model's script in this process on the adapter's SparkSession (no job submission: there
        is no cluster API to submit to). The script's tail (hudilite_py_script.sql) calls `hudilite_write_model`
        with its `model()`, written as a SQL model's rows are; returns that write's adapter response."""
        schema, identifier, unique_id = parsed_model["schema"], parsed_model["alias"], parsed_model["unique_id"]
        with self._python_lock:
            prepared = self._python_models.pop(unique_id, None)
        if prepared is None:
            raise DbtRuntimeError(f"Python model {unique_id}: submit_python_job outside hudilite's table or "
                                  "incremental materialization (its config was not prepared)")
        kind, cfg = prepared
        spark = self.env.spark

        def write_model(produce):
            set_publish_options(self.env, schema, identifier, cfg)
            return self.env.materialize(schema, identifier, None, kind, cfg, python=produce)

        names = {"spark": spark, "session": spark, "hudilite_load_table": self.env.python_ref_frame,
                 "hudilite_write_model": write_model}
        return run_script(compiled_code, unique_id, names)

    @property
    def default_python_submission_method(self) -> str:
        return "session"

    @property
    def python_submission_helpers(self):
        return {}  # submit_python_job runs the script itself

    # ---- incremental reads, aggregates (dbt/adapters/hudilite/incremental.py, aggregate.py) ----------------
    @available
    def hudilite_changes(self, this, relation, begin=None, end=None, include_deletes=True, before_image=False,
                         materialized=None, full_refresh=False, resource_type=None, location_root=None,
                         strategy=None) -> str:
        """`{{ hudilite.changes(ref('x')) }}`: a temporary view of the upstream's changes since this model's
        checkpoint (or the explicit `begin`/`end` range); returns its quoted name."""
        return changes_relation(self.env, this, relation, begin, end, include_deletes, before_image,
                                materialized, bool(full_refresh), resource_type, location_root, strategy)

    @available
    def hudilite_read(self, relation, as_of=None, ready_only=False) -> str:
        """`{{ hudilite.as_of(ref('x'), t) }}` / `{{ hudilite.read(ref('x'), ready_only=true) }}`."""
        return read_relation(self.env, relation, as_of, ready_only)

    @available
    def hudilite_materialize_aggregate(self, relation, compiled_code: str, cfg: Dict[str, Any]):
        """`materialized='aggregate'`: full build, or the detail's changes folded into the affected groups."""
        return materialize_aggregate(self.env, relation.schema, relation.identifier, compiled_code, cfg)
