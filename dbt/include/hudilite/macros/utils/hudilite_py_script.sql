{#-- The script a Python model runs (adapter.submit_python_job executes it in the dbt process): dbt's compiled
     code (the user's `model` and dbt's dbtObj) and a tail that hands `model` to the adapter's hudilite write,
     which calls it inside the model's write path (python_model.py). `kind`: 'table' or 'incremental'; `cfg`:
     hudilite_model_config(), handed to the adapter beside the script (it holds datetimes). dbt.ref /
     dbt.source read the catalog entries (without hudilite's hidden columns); `spark` and `session` are the
     adapter's session. --#}
{% macro hudilite_py_script(compiled_code, kind, cfg) %}
{%- do adapter.hudilite_python_model_config(model['unique_id'], kind, cfg) -%}
{{ compiled_code }}

# --- hudilite: the model's frame is written by the adapter (one hudilite commit, as a SQL model's rows) --- #
dbt_hudilite_response = hudilite_write_model(lambda: model(dbtObj(hudilite_load_table), session))
{% endmacro %}
