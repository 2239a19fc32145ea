{#-- Shared end of the materializations that write one hudilite table (incremental, aggregate): after the
     write of `target_relation`, grants (revoked first as dbt's should_revoke decides), persisted docs,
     post-hooks; returns the materialization's result. --#}
{% macro hudilite_finish_table(target_relation, existing_relation, full_refresh_mode) %}
  {% set revoke = should_revoke(existing_relation, full_refresh_mode) %}
  {% do apply_grants(target_relation, config.get('grants'), revoke) %}
  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmacro %}
