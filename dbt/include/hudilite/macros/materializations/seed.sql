{#-- Seeds are hudilite tables too, loaded from the CSV's parsed values through a DataFrame (no SQL literals:
     quotes, commas and backslashes in values are safe). Re-seeding is one insert_overwrite_table commit. --#}
{% materialization seed, adapter='hudilite' %}
  {%- set identifier = model['alias'] -%}
  {%- set full_refresh_mode = should_full_refresh() -%}
  {%- set grant_config = config.get('grants') -%}
  {%- set old_relation = adapter.get_relation(database=database, schema=schema, identifier=identifier) -%}
  {%- if old_relation is not none and old_relation.is_view -%}
    {{ exceptions.raise_compiler_error("Cannot seed to '{}', it is a view".format(old_relation.render())) }}
  {%- endif -%}
  {%- set agate_table = load_agate_table() -%}
  {%- do store_result('agate_table', response='OK', agate_table=agate_table) -%}
  {%- set target_relation = this.incorporate(type='table') -%}

  {{ run_hooks(pre_hooks) }}

  {%- set cfg = hudilite_model_config() -%}
  {%- do cfg.update({'column_types': config.get('column_types', {})}) -%}
  {%- set response = adapter.hudilite_load_seed(target_relation, agate_table, cfg) -%}
  {%- do store_result('main', response=response) -%}

  {% set should_revoke = should_revoke(old_relation, full_refresh_mode) %}
  {% do apply_grants(target_relation, grant_config, should_revoke=should_revoke) %}
  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
