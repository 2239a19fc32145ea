{% macro hudilite__alter_column_comment(relation, column_dict) %}
  {% for column_name in column_dict %}
    {% set comment = column_dict[column_name]['description'] | replace("\\", "\\\\") | replace("'", "\\'") %}
    {% do run_query("alter table " ~ relation ~ " change column " ~ adapter.quote(column_name)
                    ~ " comment '" ~ comment ~ "'") %}
  {% endfor %}
{% endmacro %}
