{#-- persist_docs on hudilite tables: the model description becomes the table comment, column descriptions
     the column comments (re-applied after every run, since a schema change recreates the catalog entry).
     Views get theirs from dbt-spark's create_view_as. --#}
{% macro hudilite__persist_docs(relation, model, for_relation, for_columns) -%}
  {%- if relation.type == 'table' -%}
    {%- if for_relation and config.persist_relation_docs() and model.description -%}
      {%- set comment = model.description | replace("\\", "\\\\") | replace("'", "\\'") -%}
      {%- do run_query("alter table " ~ relation ~ " set tblproperties ('comment' = '" ~ comment ~ "')") -%}
    {%- endif -%}
    {%- if for_columns and config.persist_column_docs() and model.columns -%}
      {%- set existing_columns = adapter.get_columns_in_relation(relation) | map(attribute="name") | list -%}
      {%- set filtered_columns = validate_doc_columns(relation, model.columns, existing_columns) -%}
      {%- do alter_column_comment(relation, filtered_columns) -%}
    {%- endif -%}
  {%- endif -%}
{%- endmacro %}
