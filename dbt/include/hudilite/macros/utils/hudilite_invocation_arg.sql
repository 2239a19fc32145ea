{#-- A command-line argument of this dbt invocation as a string (none when not given), e.g. event_time_start:
     dbt keeps them as Python values (a datetime), the adapter's config dict carries text. --#}
{% macro hudilite_invocation_arg(name) %}
  {%- set value = invocation_args_dict.get(name) -%}
  {%- do return(none if value is none else (value | string)) -%}
{% endmacro %}
