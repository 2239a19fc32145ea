{#-- The model's upstream models and sources with their event_time config, for `microbatch_source: changes`
     (dbt/adapters/hudilite/change_batches.py): the refs dbt filters to a batch's window are the ones whose
     committed changes pick the windows to rebuild. --#}
{% macro hudilite_microbatch_upstreams() %}
  {%- set ups = [] -%}
  {%- for uid in model.depends_on.nodes -%}
    {%- set node = graph.nodes.get(uid) or graph.sources.get(uid) -%}
    {%- if node -%}
      {%- do ups.append({
          'schema': node.schema,
          'identifier': node.identifier if node.resource_type == 'source' else (node.alias or node.name),
          'event_time': node.config.event_time if node.config else none,
      }) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- do return(ups) -%}
{% endmacro %}
