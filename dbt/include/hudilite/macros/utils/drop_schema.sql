{% macro hudilite__drop_schema(relation) -%}
  {% do adapter.hudilite_drop_schema(relation) %}
{%- endmacro %}
