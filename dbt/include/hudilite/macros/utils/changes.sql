{#-- Incremental reads of upstream hudilite tables in model SQL (docs/incremental.md).

     {{ hudilite.changes(ref('orders')) }}         upstream changes since this model's checkpoint, up to the
                                                    upstream's newest commit when the model starts; columns of
                                                    the table + _change_op ('I' / 'U' / 'D', 'B' = before image)
     {{ hudilite.changes(ref('orders'), begin='20240101000000000', end='...') }}   explicit range, no checkpoint
     {{ hudilite.as_of(ref('orders'), '2024-03-01T00:00:00Z') }}                  time travel
     {{ hudilite.read(ref('orders'), ready_only=true) }}                          only partitions marked ready

     The checkpoint goes into the commit that writes the model (incremental / aggregate models), so a failed run
     consumes nothing. First run and --full-refresh read the full snapshot (all rows 'I').
     `hudilite.x` is the same as the global macro `hudilite_x`. --#}
{% macro hudilite_changes(relation, begin=none, end=none, include_deletes=true, before_image=false) -%}
  {%- if not execute -%}{{ return(relation) }}{%- endif -%}
  {{ return(adapter.hudilite_changes(this, relation, begin, end, include_deletes, before_image,
                                     config.get('materialized'), should_full_refresh(),
                                     model.resource_type if model is defined and model else none)) }}
{%- endmacro %}

{% macro hudilite_as_of(relation, instant) -%}
  {%- if not execute -%}{{ return(relation) }}{%- endif -%}
  {{ return(adapter.hudilite_read(relation, instant, false)) }}
{%- endmacro %}

{% macro hudilite_read(relation, as_of=none, ready_only=false) -%}
  {%- if not execute -%}{{ return(relation) }}{%- endif -%}
  {{ return(adapter.hudilite_read(relation, as_of, ready_only)) }}
{%- endmacro %}

{#-- audit_before_publish: the generic tests attached to this model, for the audit of its pending write
     (adapter: incremental.run_audits). --#}
{% macro hudilite_audit_tests() -%}
  {%- set out = [] -%}
  {%- if execute -%}
    {%- for node in graph.nodes.values() -%}
      {%- if node.resource_type == 'test' and node.attached_node == model.unique_id and node.test_metadata -%}
        {%- set kw = {} -%}
        {%- for k, v in node.test_metadata.kwargs.items() if k != 'model' -%}{%- do kw.update({k: v}) -%}{%- endfor -%}
        {%- do out.append({'unique_id': node.unique_id, 'name': node.test_metadata.name, 'kwargs': kw,
                           'severity': node.config.severity, 'where': node.config.where}) -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return(out) }}
{%- endmacro %}
