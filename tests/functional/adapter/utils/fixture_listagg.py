"""`listagg` model for Spark, as dbt-spark's suite has it: Spark's `listagg` equivalent (`array_join(collect_list)`)
cannot order its input nor limit it, so spark__listagg ignores `order_by`/`limit_num`; the model therefore
checks only the unordered variants, on a group whose values are all equal (group 3), where order cannot matter."""

models__test_listagg_no_order_by_sql = """
with data as (
    select * from {{ ref('data_listagg') }}
),
data_output as (
    select * from {{ ref('data_listagg_output') }}
),
calculate as (
    select
        group_col,
        {{ listagg('string_text', "', '") }} as actual,
        'comma_whitespace_unordered' as version
    from data
    where group_col = 3
    group by group_col
    union all
    select
        group_col,
        {{ listagg('DISTINCT string_text', "','") }} as actual,
        'distinct_comma' as version
    from data
    where group_col = 3
    group by group_col
    union all
    select
        group_col,
        {{ listagg('string_text') }} as actual,
        'no_params' as version
    from data
    where group_col = 3
    group by group_col
)
select
    calculate.actual,
    data_output.expected
from calculate
left join data_output
on calculate.group_col = data_output.group_col
and calculate.version = data_output.version
"""
