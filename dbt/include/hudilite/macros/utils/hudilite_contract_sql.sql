{#-- With an enforced contract: check the model's columns against it and select them in contract order with
     the contract's types (as dbt-spark's create_table_as does). --#}
{% macro hudilite_contract_sql(compiled_code) %}
  {%- set contract_config = config.get('contract') -%}
  {%- if contract_config is not none and contract_config.enforced -%}
    {{ get_assert_columns_equivalent(compiled_code) }}
    {%- do return(get_select_subquery(compiled_code)) -%}
  {%- endif -%}
  {%- do return(compiled_code) -%}
{% endmacro %}
