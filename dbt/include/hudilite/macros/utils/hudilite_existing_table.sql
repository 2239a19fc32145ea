{#-- Shared by the materializations that write one hudilite table (incremental, aggregate). The model's
     existing relation: none when there is none, or when it is a view (a model changed from view to
     a table materialization), which is dropped first. --#}
{% macro hudilite_existing_table() %}
  {%- set existing_relation = load_relation(this) -%}
  {%- if existing_relation is not none and existing_relation.is_view -%}
    {% do adapter.drop_relation(existing_relation) %}
    {%- set existing_relation = none -%}
  {%- endif -%}
  {{ return(existing_relation) }}
{% endmacro %}
