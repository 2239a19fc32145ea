{#-- `{{ hudilite.as_of(ref('x'), instant) }}`: the upstream as of an instant (time travel; no checkpoint). --#}
{% macro hudilite_as_of(relation, instant) -%}
  {%- if not execute -%}{{ return(relation) }}{%- endif -%}
  {{ return(adapter.hudilite_read(relation, instant, false)) }}
{%- endmacro %}
