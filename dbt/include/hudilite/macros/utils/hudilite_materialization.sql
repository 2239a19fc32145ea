{#-- The shared start and end of the materializations that write one hudilite table (incremental, aggregate). --#}

{#-- The model's existing relation: none when there is none, or when it is a view (a model changed from view to
     a table materialization), which is dropped first. --#}
{% macro hudilite_existing_table() %}
  {%- set existing_relation = load_relation(this) -%}
  {%- if existing_relation is not none and existing_relation.is_view -%}
    {% do adapter.drop_relation(existing_relation) %}
    {%- set existing_relation = none -%}
  {%- endif -%}
  {{ return(existing_relation) }}
{% endmacro %}

{#-- After the write of `target_relation`: grants (revoked first as dbt's should_revoke decides), persisted docs,
     post-hooks; returns the materialization's result. --#}
{% macro hudilite_finish_table(target_relation, existing_relation, full_refresh_mode) %}
  {% set revoke = should_revoke(existing_relation, full_refresh_mode) %}
  {% do apply_grants(target_relation, config.get('grants'), revoke) %}
  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmacro %}
