{#-- The 'main' statement of a table or incremental model: a SQL model's rows (its contract checked) or a Python
     model's frame (its script runs in this process: adapter.submit_python_job) written as one hudilite commit
     of `kind` ('table' or 'incremental'); the adapter response is stored as the model's result. --#}
{% macro hudilite_write_main(target_relation, compiled_code, kind) %}
  {%- if model['language'] == 'python' -%}
    {%- call statement('main', language='python') -%}
      {{ hudilite_py_script(compiled_code, kind, hudilite_model_config()) }}
    {%- endcall -%}
  {%- else -%}
    {%- set code = hudilite_contract_sql(compiled_code) -%}
    {%- set response = adapter.hudilite_materialize(target_relation, code, kind, hudilite_model_config()) -%}
    {%- do store_result('main', response=response) -%}
  {%- endif -%}
{% endmacro %}
