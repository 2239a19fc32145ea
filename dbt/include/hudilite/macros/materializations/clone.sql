{#-- `dbt clone`: a hudilite table of the state's relation becomes a new, independent hudilite table with the
     same rows and layout (one commit; dbt/adapters/hudilite/clone.py says why it is a copy, not a table
     referencing the source's files). Other relations (views, non-hudilite tables) are cloned as views, as
     dbt's default does where tables cannot be cloned. --#}
{%- materialization clone, adapter='hudilite' -%}

  {%- if not defer_relation -%}
      {{ log("No relation found in state manifest for " ~ model.unique_id, info=True) }}
      {{ return({'relations': []}) }}
  {%- endif -%}

  {%- set existing_relation = load_cached_relation(this) -%}
  {%- if existing_relation and not flags.FULL_REFRESH -%}
      {{ log("Relation " ~ existing_relation ~ " already exists", info=True) }}
      {{ return({'relations': []}) }}
  {%- endif -%}

  {%- set other_existing_relation = load_cached_relation(defer_relation) -%}
  {%- if other_existing_relation and other_existing_relation.is_hudilite -%}
      {%- set target_relation = this.incorporate(type='table') -%}
      {%- if target_relation.schema == defer_relation.schema and
            target_relation.identifier == defer_relation.identifier -%}
        {{ log("Target relation and defer relation are the same, skipping clone for relation: " ~ target_relation.render()) }}
      {%- else -%}
        {%- if existing_relation is not none and not existing_relation.is_hudilite -%}
          {{ drop_relation_if_exists(existing_relation) }}
        {%- endif -%}
        {%- set response = adapter.hudilite_clone(target_relation, defer_relation) -%}
        {%- do store_result('main', response=response) -%}
      {%- endif -%}
      {% set should_revoke = should_revoke(existing_relation, full_refresh_mode=True) %}
      {% do apply_grants(target_relation, config.get('grants'), should_revoke=should_revoke) %}
      {% do persist_docs(target_relation, model) %}
      {{ return({'relations': [target_relation]}) }}
  {%- else -%}
      {%- set target_relation = this.incorporate(type='view') -%}
      {%- if existing_relation is not none and not existing_relation.is_view -%}
        {{ drop_relation_if_exists(existing_relation) }}
      {%- endif -%}
      {#-- dbt-spark's view materialization (materializations cannot be dispatched: dbt-core #7799) --#}
      {%- set search_name = "materialization_view_spark" if "materialization_view_spark" in context
                            else "materialization_view_default" -%}
      {{ return(context[search_name]()) }}
  {%- endif -%}

{%- endmaterialization -%}
