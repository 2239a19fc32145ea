{#-- `{{ hudilite.read(ref('x'), ready_only=true) }}`: a read of the upstream (only partitions marked ready). --#}
{% macro hudilite_read(relation, as_of=none, ready_only=false) -%}
  {%- if not execute -%}{{ return(relation) }}{%- endif -%}
  {{ return(adapter.hudilite_read(relation, as_of, ready_only)) }}
{%- endmacro %}
