{#-- A query over hudilite tables (`select *`) carries their `_hoodie_*` meta columns; dbt's column logic
     (snapshot check_cols='all', new_record deletes, ...) must not see them, just as get_columns_in_relation
     hides them. --#}
{% macro hudilite__get_columns_in_query(select_sql) %}
  {% call statement('get_columns_in_query', fetch_result=True, auto_begin=False) -%}
    {{ get_empty_subquery_sql(select_sql) }}
  {% endcall %}
  {%- set names = load_result('get_columns_in_query').table.columns | map(attribute='name') | list -%}
  {{ return(adapter.hudilite_visible_columns(names)) }}
{% endmacro %}
