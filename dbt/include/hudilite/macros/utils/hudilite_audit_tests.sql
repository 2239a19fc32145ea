{#-- audit_before_publish: the generic tests attached to this model, for the audit of its pending write
     (adapter: audit.run_audits). --#}
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
