{#-- materialized='aggregate': a hudilite table of group keys + count/sum/avg/min/max/count(distinct) over ONE
     hudilite detail table, kept up to date from the detail's changes (docs/incremental.md):
       first run / --full-refresh / changed SQL   computed in full from the detail snapshot
       later runs                                   the detail's changes since the checkpoint (before images,
                                                    deletes) folded into the affected groups (min / max /
                                                    count(distinct) through value multisets, or recomputed
                                                    for those groups); empty groups deleted; ONE upsert
                                                    commit carrying the new checkpoint
     Unsupported SQL shapes are compilation errors. Configs: partition_by (group keys), options. --#}
{% materialization aggregate, adapter='hudilite', supported_languages=['sql'] %}
  {%- set existing_relation = hudilite_existing_table() -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set full_refresh_mode = should_full_refresh() -%}

  {{ run_hooks(pre_hooks) }}

  {%- set response = adapter.hudilite_materialize_aggregate(target_relation, compiled_code, hudilite_model_config()) -%}
  {%- do store_result('main', response=response) -%}

  {{ return(hudilite_finish_table(target_relation, existing_relation, full_refresh_mode)) }}
{% endmaterialization %}
