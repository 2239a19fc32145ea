{#-- dbt-spark's spark__get_columns_in_relation returns the raw `describe extended` table, which macros that
     expect Column objects (e.g. snapshots with hard_deletes='new_record') cannot use: return the adapter's
     columns (meta columns hidden), as other adapters do. --#}
{% macro hudilite__get_columns_in_relation(relation) -%}
  {{ return(adapter.get_columns_in_relation(relation)) }}
{%- endmacro %}
