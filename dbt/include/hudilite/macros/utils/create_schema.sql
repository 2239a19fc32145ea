{#-- A schema is a Spark database located at <warehouse>/<schema>, where its hudilite tables live. --#}
{% macro hudilite__create_schema(relation) -%}
  {% do adapter.hudilite_create_schema(relation) %}
{%- endmacro %}
