{#-- The configs hudilite reads, as one dict for adapter.hudilite_materialize (names follow dbt-spark's Hudi
     conventions: options.primaryKey / options.preCombineField are accepted as aliases). batch_start / batch_end:
     a microbatch batch's window, the same values dbt renders into the upstream refs' event-time filters;
     event_time_start / event_time_end: the invocation's --event-time-start / --event-time-end. --#}
{% macro hudilite_model_config() %}
  {%- set cfg = {
      'unique_key': config.get('unique_key'),
      'precombine_field': config.get('precombine_field'),
      'partition_by': config.get('partition_by'),
      'table_type': config.get('table_type'),
      'incremental_strategy': config.get('incremental_strategy'),
      'incremental_predicates': config.get('incremental_predicates') or config.get('predicates'),
      'merge_update_columns': config.get('merge_update_columns'),
      'merge_exclude_columns': config.get('merge_exclude_columns'),
      'delete_condition': config.get('delete_condition'),
      'on_schema_change': config.get('on_schema_change'),
      'options': config.get('options'),
      'tblproperties': config.get('tblproperties'),
      'location_root': config.get('location_root'),
      'full_refresh': should_full_refresh(),
      'audit_before_publish': config.get('audit_before_publish'),
      'mark_ready': config.get('mark_ready'),
      'event_time': config.get('event_time'),
      'batch_start': model.batch.event_time_start if model.batch else none,
      'batch_end': model.batch.event_time_end if model.batch else none,
      'microbatch_source': config.get('microbatch_source'),
      'batch_size': config.get('batch_size'),
      'begin': config.get('begin'),
      'event_time_start': hudilite_invocation_arg('event_time_start'),
      'event_time_end': hudilite_invocation_arg('event_time_end'),
      'microbatch_upstreams': hudilite_microbatch_upstreams() if config.get('microbatch_source') else [],
      'audit_tests': hudilite_audit_tests() if config.get('audit_before_publish') else [],
  } -%}
  {%- do cfg.update(hudilite_constraints()) -%}
  {%- do return(cfg) -%}
{% endmacro %}
