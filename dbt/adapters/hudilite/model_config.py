"""A model's hudilite configuration (`ModelSpec`, resolved from dbt config) and the adapter's hidden columns."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql import functions as F

from hudilite import options as o
from hudilite.columns import META_FIELDS, ROW_ID_FIELD, is_system_column  # noqa: F401 (re-exported)

ROW_ID = ROW_ID_FIELD  # record key of tables without unique_key (the core needs a key column)
IS_DELETED = "_hoodie_is_deleted"
STRATEGIES = ("upsert", "append", "insert_overwrite", "delete+insert", "microbatch")
STRATEGY_ALIASES = {"merge": "upsert", "insert": "append", "delete_insert": "delete+insert"}
MICROBATCH_SOURCES = ("time", "changes")  # dbt's wall-clock batches; the upstreams' commits (change_batches.py)
SCHEMA_CHANGES = ("ignore", "fail", "append_new_columns", "sync_all_columns")
_WRITE_OPTION_PREFIXES = ("hoodie.", "hudilite.write.")
is_hidden_column = is_system_column


@dataclass
class ModelSpec:
    """A model's hudilite configuration, resolved from dbt config (dbt-spark Hudi names accepted)."""

    record_key: List[str]
    precombine_field: Optional[str]
    partition_by: List[str]
    table_type: str
    strategy: Optional[str]
    predicates: List[str]
    update_columns: Optional[List[str]]
    exclude_columns: Optional[List[str]]
    delete_condition: Optional[str]
    on_schema_change: str
    hoodie_options: Dict[str, str]
    table_props: Dict[str, str]
    location_root: Optional[str]
    full_refresh: bool = False
    not_null: Tuple[str, ...] = ()  # an enforced contract's not_null columns (checked before writing)
    event_time: Optional[str] = None
    batch: Optional[Tuple[str, str]] = None  # a microbatch batch's window [start, end), as dbt renders it
    microbatch_source: str = "time"  # 'changes': batches from the upstreams' commits (change_batches.py)

    def deletes(self, columns=()):
        """The model's rows that are deletes, as a boolean Column (null counts as false): those `delete_condition`
        marks, else, when `columns` has it, those the `_hoodie_is_deleted` column flags; None when neither."""
        if self.delete_condition:
            return F.coalesce(F.expr(f"({self.delete_condition})").cast("boolean"), F.lit(False))
        if IS_DELETED in columns:
            return F.coalesce(F.col(IS_DELETED).cast("boolean"), F.lit(False))
        return None
    batch_size: Optional[str] = None
    begin: Optional[str] = None
    upstreams: Tuple[dict, ...] = ()  # refs of a changes-driven model: schema, identifier, event_time
    event_time_start: Optional[str] = None  # --event-time-start / --event-time-end of the invocation
    event_time_end: Optional[str] = None

    @property
    def event_time_bounds(self) -> Tuple[Optional[dt.datetime], Optional[dt.datetime]]:
        """The invocation's --event-time-start / --event-time-end as UTC datetimes (dbt reads naive ones as
        UTC), None where not given."""
        return _utc(self.event_time_start), _utc(self.event_time_end)

    def spelled_as(self, columns: List[str]) -> "ModelSpec":
        """This spec with its column names spelled as the model's `columns` spell them: SQL names are
        case-insensitive, the table's key and partition fields are not (they name Hudi schema fields)."""
        spelling = {c.lower(): c for c in columns}

        def one(name: Optional[str]) -> Optional[str]:
            return spelling.get(name.lower(), name) if name else name

        return replace(self, record_key=[one(k) for k in self.record_key],
                       partition_by=[one(p) for p in self.partition_by],
                       precombine_field=one(self.precombine_field), event_time=one(self.event_time))

    @classmethod
    def from_config(cls, cfg: Dict[str, Any]) -> "ModelSpec":
        cfg = dict(cfg or {})
        options = dict(cfg.get("options") or {})
        tblprops = dict(cfg.get("tblproperties") or {})
        merged = {**{str(k): v for k, v in tblprops.items()}, **{str(k): v for k, v in options.items()}}
        # the core's write options: Hudi's keys and hudilite's own (hudilite.write.small.batch.*, ...)
        hoodie = {k: str(v) for k, v in merged.items() if k.startswith(_WRITE_OPTION_PREFIXES)}
        props = {k: str(v) for k, v in merged.items()
                 if not k.startswith(_WRITE_OPTION_PREFIXES) and k not in ("primaryKey", "preCombineField", "type")}
        # an enforced contract's other constraints are recorded, not enforced (hudilite_constraints.sql)
        props.update({f"hudilite.constraints.{name}": str(text)
                      for name, text in (cfg.get("constraints") or {}).items()})
        unique_key = _unique_names(_as_list(cfg.get("unique_key")))  # dbt accepts ['state', 'state']
        pk = _unique_names(_as_list(merged.get("primaryKey")))
        if pk and unique_key and [k.lower() for k in pk] != [k.lower() for k in unique_key]:
            raise DbtRuntimeError(f"unique_key {unique_key} and options.primaryKey {pk} must name the same columns")
        record_key = unique_key or pk or _as_list(hoodie.get(o.RECORD_KEY.key))
        pcf = cfg.get("precombine_field") or merged.get("preCombineField") or hoodie.get(
            o.PRECOMBINE.key)
        if cfg.get("precombine_field") and merged.get("preCombineField") and \
                cfg["precombine_field"] != merged["preCombineField"]:
            raise DbtRuntimeError("precombine_field and options.preCombineField must name the same column")
        parts = _as_list(cfg.get("partition_by")) or _as_list(hoodie.get(o.PARTITION_BY.key))
        tt = str(cfg.get("table_type") or merged.get("type") or hoodie.get(o.TABLE_TYPE.key)
                 or "cow").lower()
        table_type = {"cow": "COPY_ON_WRITE", "copy_on_write": "COPY_ON_WRITE", "mor": "MERGE_ON_READ",
                      "merge_on_read": "MERGE_ON_READ"}.get(tt)
        if table_type is None:
            raise DbtRuntimeError(f"table_type {cfg.get('table_type')!r}: expected 'cow' or 'mor'")
        strategy = cfg.get("incremental_strategy")
        if strategy:
            strategy = STRATEGY_ALIASES.get(str(strategy).lower(), str(strategy).lower())
            if strategy not in STRATEGIES:
                raise DbtRuntimeError(
                    f"incremental_strategy {cfg.get('incremental_strategy')!r} is not supported by hudilite; "
                    f"expected one of: {', '.join(STRATEGIES)} (aliases: merge=upsert, insert=append)")
        osc = str(cfg.get("on_schema_change") or "ignore").lower()
        if osc not in SCHEMA_CHANGES:
            raise DbtRuntimeError(f"on_schema_change {osc!r}: expected one of {', '.join(SCHEMA_CHANGES)}")
        source = str(cfg.get("microbatch_source") or "time").lower()
        if source not in MICROBATCH_SOURCES:
            raise DbtRuntimeError(f"microbatch_source {cfg.get('microbatch_source')!r}: expected 'time' (dbt's "
                                  "wall-clock batches, the default) or 'changes' (batches from the upstreams' "
                                  "committed changes)")
        if source == "changes" and strategy and strategy != "microbatch":  # (table models ignore it)
            raise DbtRuntimeError(f"microbatch_source 'changes' needs incremental_strategy 'microbatch' "
                                  f"(it is {strategy!r})")
        upd = cfg.get("merge_update_columns")
        exc = cfg.get("merge_exclude_columns")
        if upd and exc:
            raise DbtRuntimeError("merge_update_columns and merge_exclude_columns cannot both be set")
        preds = cfg.get("incremental_predicates") or []
        if isinstance(preds, str):
            preds = [preds]
        return cls(
            record_key=record_key, precombine_field=pcf or None, partition_by=parts, table_type=table_type,
            strategy=strategy, predicates=[str(p) for p in preds],
            update_columns=_as_list(upd) if upd else None, exclude_columns=_as_list(exc) if exc else None,
            delete_condition=cfg.get("delete_condition") or None, on_schema_change=osc,
            hoodie_options=hoodie, table_props=props, location_root=cfg.get("location_root"),
            full_refresh=bool(cfg.get("full_refresh")),
            not_null=tuple(str(c) for c in cfg.get("not_null_columns") or ()),
            event_time=cfg.get("event_time") or None,
            batch=(str(cfg["batch_start"]), str(cfg["batch_end"])) if cfg.get("batch_start") else None,
            microbatch_source=source,
            batch_size=str(cfg["batch_size"]).lower() if cfg.get("batch_size") else None,
            begin=str(cfg["begin"]) if cfg.get("begin") else None,
            upstreams=tuple(dict(u) for u in cfg.get("microbatch_upstreams") or ()),
            event_time_start=str(cfg["event_time_start"]) if cfg.get("event_time_start") else None,
            event_time_end=str(cfg["event_time_end"]) if cfg.get("event_time_end") else None,
        )


def _utc(text: Optional[str]) -> Optional[dt.datetime]:
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise DbtRuntimeError(f"--event-time-start/-end {text!r} is not a date or timestamp") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _unique_names(names: List[str]) -> List[str]:
    seen, out = set(), []
    for n in names:
        if n.lower() not in seen:
            seen.add(n.lower())
            out.append(n)
    return out


def _as_list(v) -> List[str]:
    if v is None or v == "":
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(s) for s in v]




def config_flag(cfg: Dict[str, Any], name: str) -> bool:
    v = cfg.get(name)
    return str(v).lower() in ("true", "1", "yes") if isinstance(v, str) else bool(v)
