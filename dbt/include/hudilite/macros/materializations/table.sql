{#-- A hudilite table. First build: one bulk_insert commit (insert when unique_key is set: keys are
     de-duplicated). Rebuild / --full-refresh: ONE insert_overwrite_table commit on the existing table, so the
     old snapshot stays readable until the new one completes and a failed rebuild leaves it untouched. --#}
{% materialization table, adapter='hudilite', supported_languages=['sql', 'python'] %}
  {%- set identifier = model['alias'] -%}
  {%- set grant_config = config.get('grants') -%}
  {%- set old_relation = adapter.get_relation(database=database, schema=schema, identifier=identifier) -%}
  {%- set target_relation = api.Relation.create(identifier=identifier, schema=schema, database=database,
                                                type='table') -%}

  {{ run_hooks(pre_hooks) }}

  {%- if model['language'] == 'python' -%}
    {#-- the script runs in this process (adapter.submit_python_job); statement stores its response. Not in a
         shared macro: dbt lets submit_python_job run only from the materialization itself --#}
    {%- call statement('main', language='python') -%}
      {{ hudilite_py_script(compiled_code, 'table', hudilite_model_config()) }}
    {%- endcall -%}
  {%- else -%}
    {%- set code = hudilite_contract_sql(compiled_code) -%}
    {%- set response = adapter.hudilite_materialize(target_relation, code, 'table', hudilite_model_config()) -%}
    {%- do store_result('main', response=response) -%}
  {%- endif -%}

  {% set should_revoke = should_revoke(old_relation, full_refresh_mode=True) %}
  {% do apply_grants(target_relation, grant_config, should_revoke) %}
  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
