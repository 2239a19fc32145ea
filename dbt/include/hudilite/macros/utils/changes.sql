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
  {#-- In a unit test the upstream is the test's fixture (a CTE): its given rows are the change feed, all 'I'
       (what a first run reads). `overrides: {vars: {hudilite_fixture_change_ops: true}}` takes the fixture
       as it is instead: a `format: sql` fixture that selects `_change_op` too ('U', 'D' rows). --#}
  {%- if relation.is_cte or (model is defined and model and model.resource_type == 'unit_test') -%}
    {%- if var('hudilite_fixture_change_ops', false) -%}
      {{ return(relation) }}
    {%- endif -%}
    {{ return("(select *, 'I' as _change_op from " ~ relation ~ ")") }}
  {%- endif -%}
  {{ return(adapter.hudilite_changes(this, relation, begin, end, include_deletes, before_image,
                                     config.get('materialized'), should_full_refresh(),
                                     model.resource_type if model is defined and model else none,
                                     config.get('location_root'), config.get('incremental_strategy'))) }}
{%- endmacro %}
