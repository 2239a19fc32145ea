{#-- Dropping a hudilite table removes its catalog entry and its directory (like a managed table). --#}
{% macro hudilite__drop_relation(relation) -%}
  {% do adapter.hudilite_drop_relation(relation) %}
{%- endmacro %}
