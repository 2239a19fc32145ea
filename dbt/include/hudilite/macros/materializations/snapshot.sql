{#-- Snapshots (SCD2: `timestamp` and `check` strategies, hard deletes) as hudilite tables keyed by dbt_scd_id.
     First run: the snapshot table is built (one commit). Later runs: dbt's staging query (new versions,
     closed versions, hard deletes) is written as ONE upsert commit: rows whose dbt_scd_id is stored only get
     their dbt_valid_to updated (partial update), new versions are inserted whole — dbt's snapshot merge. --#}
{% materialization snapshot, adapter='hudilite' %}
  {%- set target_table = model.get('alias', model.get('name')) -%}
  {%- set strategy_name = config.get('strategy') -%}
  {%- set grant_config = config.get('grants') -%}

  {% set target_relation_exists, target_relation = get_or_create_relation(
          database=none, schema=model.schema, identifier=target_table, type='table') -%}

  {%- if target_relation_exists and not target_relation.is_hudilite -%}
    {% do exceptions.raise_compiler_error("The existing relation " ~ target_relation ~ " is not a hudilite table: drop it to snapshot into it") %}
  {%- endif -%}
  {%- if not target_relation.is_table -%}
    {% do exceptions.relation_wrong_type(target_relation, 'table') %}
  {%- endif -%}
  {% if not adapter.check_schema_exists(model.database, model.schema) %}
    {% do create_schema(model.schema) %}
  {% endif %}

  {{ run_hooks(pre_hooks) }}

  {% set strategy_macro = strategy_dispatch(strategy_name) %}
  {% set strategy = strategy_macro(model, "snapshotted_data", "source_data", model['config'], target_relation_exists) %}
  {% set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() %}

  {%- set cfg = hudilite_model_config() -%}
  {%- do cfg.update({'unique_key': columns.dbt_scd_id, 'incremental_strategy': 'upsert', 'precombine_field': none,
                     'delete_condition': none, 'partition_by': none, 'incremental_predicates': none,
                     'merge_exclude_columns': none, 'merge_update_columns': [columns.dbt_valid_to],
                     'on_schema_change': 'append_new_columns', 'full_refresh': false}) -%}

  {% if not target_relation_exists %}
      {% set build_sql = build_snapshot_table(strategy, model['compiled_code']) %}
      {{ check_time_data_types(build_sql) }}
      {%- set response = adapter.hudilite_materialize(target_relation, build_sql, 'table', cfg) -%}
  {% else %}
      {{ adapter.assert_valid_snapshot_target_given_strategy(target_relation, columns, strategy) }}
      {% set staging_sql = snapshot_staging_table(strategy, sql, target_relation) %}
      {{ check_time_data_types(staging_sql) }}
      {%- set drop = ['dbt_change_type', 'dbt_unique_key'] -%}
      {%- if config.get('unique_key') | is_list -%}
        {%- for key in strategy.unique_key -%}{%- do drop.append('dbt_unique_key_' ~ loop.index) -%}{%- endfor -%}
      {%- endif -%}
      {#-- cast_to_target: the staging query's values take the snapshot table's column types (store assignment,
           as dbt's insert/merge into the snapshot does elsewhere) --#}
      {%- do cfg.update({'drop_columns': drop, 'cast_to_target': true}) -%}
      {%- set write_sql -%}
        select * from ( {{ staging_sql }} ) as dbt_snapshot_staging
        where dbt_change_type in ('insert', 'update', 'delete')
      {%- endset -%}
      {%- set response = adapter.hudilite_materialize(target_relation, write_sql, 'incremental', cfg) -%}
  {% endif %}
  {%- do store_result('main', response=response) -%}

  {% set should_revoke = should_revoke(target_relation_exists, full_refresh_mode=False) %}
  {% do apply_grants(target_relation, grant_config, should_revoke=should_revoke) %}
  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
