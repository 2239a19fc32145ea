{#-- An incremental hudilite table: the first run (and --full-refresh) builds it like `table`; later runs
     write the model's rows as ONE commit with the chosen strategy:
       upsert (default with unique_key)  record key + precombine_field through the core; delete_condition rows
                                         become deletes; merge_update_columns / merge_exclude_columns keep the
                                         stored values of the other columns for matched keys
       delete+insert                     rows replace the stored rows with the same key (one upsert commit)
       append (default without key)      insert
       insert_overwrite                  replace the partitions present in the batch (the whole table when
                                         the table is not partitioned)
     on_schema_change: ignore | fail | append_new_columns | sync_all_columns. --#}
{% materialization incremental, adapter='hudilite', supported_languages=['sql', 'python'] %}
  {%- set existing_relation = hudilite_existing_table() -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set full_refresh_mode = should_full_refresh() -%}

  {{ run_hooks(pre_hooks) }}

  {%- if model['language'] == 'python' -%}
    {#-- the script runs in this process (adapter.submit_python_job); statement stores its response. Not in a
         shared macro: dbt lets submit_python_job run only from the materialization itself --#}
    {%- call statement('main', language='python') -%}
      {{ hudilite_py_script(compiled_code, 'incremental', hudilite_model_config()) }}
    {%- endcall -%}
  {%- else -%}
    {%- set code = hudilite_contract_sql(compiled_code) -%}
    {%- set response = adapter.hudilite_materialize(target_relation, code, 'incremental', hudilite_model_config()) -%}
    {%- do store_result('main', response=response) -%}
  {%- endif -%}

  {{ return(hudilite_finish_table(target_relation, existing_relation, full_refresh_mode)) }}
{% endmaterialization %}
