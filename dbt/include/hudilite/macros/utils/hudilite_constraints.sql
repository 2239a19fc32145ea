{#-- An enforced contract's constraints, for adapter.hudilite_materialize:
       not_null_columns  enforced on write: a batch with a null in one of them fails before anything is written
       constraints       {name: text} of check / primary_key / foreign_key / unique constraints, recorded as the
                         table properties `hudilite.constraints.<name>` (as Delta records dbt-spark's CHECK
                         constraints in `delta.constraints.<name>`); not enforced. --#}
{% macro hudilite_constraints() %}
  {%- set contract_config = config.get('contract') -%}
  {%- set not_null = [] -%}
  {%- set recorded = {} -%}
  {%- if contract_config is not none and contract_config.enforced -%}
    {#-- dbt's own rendering of the constraints, for its warnings only (ConstraintNotEnforced, E048, for each
         constraint the adapter records but does not enforce, unless `warn_unenforced: false`) --#}
    {%- do adapter.render_raw_columns_constraints(raw_columns=model['columns']) -%}
    {%- do adapter.render_raw_model_constraints(raw_constraints=model.get('constraints') or []) -%}
    {%- set found = [] -%}
    {%- for column_name, column in model.columns.items() -%}
      {%- for c in column.get('constraints') or [] -%}
        {%- do found.append((c, [column_name])) -%}
      {%- endfor -%}
    {%- endfor -%}
    {%- for c in model.get('constraints') or [] -%}
      {%- do found.append((c, c.get('columns') or [])) -%}
    {%- endfor -%}
    {%- for c, columns in found -%}
      {%- set kind = c.get('type') -%}
      {%- if kind == 'not_null' -%}
        {%- for col in columns if col not in not_null -%}{%- do not_null.append(col) -%}{%- endfor -%}
      {%- elif kind in ('check', 'primary_key', 'foreign_key', 'unique') -%}
        {%- set text -%}
          {%- if kind == 'check' -%}check ({{ c.get('expression') }})
          {%- elif kind == 'foreign_key' -%}foreign key ({{ columns | join(', ') }}) references {{ c.get('to') ~ ' (' ~ (c.get('to_columns') or []) | join(', ') ~ ')' if c.get('to') else c.get('expression') }}
          {%- else -%}{{ kind | replace('_', ' ') }} ({{ columns | join(', ') }})
          {%- endif -%}
        {%- endset -%}
        {#-- unnamed: by kind and columns; checks by their expression (a column may have several) --#}
        {%- set default_name = 'check_' ~ local_md5(c.get('expression') or '')[:8] if kind == 'check'
                               else kind ~ '_' ~ (columns | join('_')) -%}
        {%- do recorded.update({(c.get('name') or default_name): text}) -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- do return({'not_null_columns': not_null, 'constraints': recorded}) -%}
{% endmacro %}
