{# Relations, columns and the SQL forms changelake speaks (Spark SQL, Snowflake's dynamic tables). #}

{% macro changelake__create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {%- if language != 'sql' -%}
    {{ exceptions.raise_compiler_error("changelake runs SQL models; " ~ language ~ " models are not supported") }}
  {%- endif -%}
  {#- changelake has no temporary tables: a temporary relation is a table its materialization drops -#}
  {{ sql_header if sql_header is not none }}
  create table {{ relation }} as {{ compiled_code }}
{%- endmacro %}

{% macro changelake__create_view_as(relation, sql) -%}
  create or replace view {{ relation }} as {{ sql }}
{%- endmacro %}

{% macro changelake__drop_relation(relation) -%}
  {% call statement('drop_relation', auto_begin=False) -%}
    {{ changelake__drop_relation_sql(relation) }}
  {%- endcall %}
{% endmacro %}

{% macro changelake__drop_relation_sql(relation) -%}
  {%- if relation.is_dynamic_table -%}
    drop dynamic table if exists {{ relation }}
  {%- elif relation.is_view -%}
    drop view if exists {{ relation }}
  {%- else -%}
    drop table if exists {{ relation }}
  {%- endif -%}
{%- endmacro %}

{% macro changelake__rename_relation(from_relation, to_relation) -%}
  {% call statement('rename_relation') -%}
    alter table {{ from_relation }} rename to {{ to_relation }}
  {%- endcall %}
{% endmacro %}

{% macro changelake__truncate_relation(relation) -%}
  {% call statement('truncate_relation') -%}
    truncate table {{ relation }}
  {%- endcall %}
{% endmacro %}

{% macro changelake__make_temp_relation(base_relation, suffix) %}
  {#- `_dbt_tmp`, not `__dbt_tmp`: `__` separates a schema from a name in the warehouse -#}
  {%- set tmp_identifier = base_relation.identifier ~ suffix | replace('__', '_') -%}
  {%- do return(base_relation.incorporate(path={"identifier": tmp_identifier}, type='table')) -%}
{% endmacro %}

{% macro changelake__current_timestamp() -%}
  current_timestamp()
{%- endmacro %}

{% macro changelake__get_columns_in_query(select_sql) %}
  {% call statement('get_columns_in_query', fetch_result=True, auto_begin=False) -%}
    select * from ({{ select_sql }}) as __dbt_sbq limit 0
  {% endcall %}
  {{ return(load_result('get_columns_in_query').table.columns | map(attribute='name') | list) }}
{% endmacro %}

{% macro changelake__alter_column_type(relation, column_name, new_column_type) -%}
  {{ exceptions.raise_compiler_error(
      "changelake cannot change the type of column " ~ column_name ~ " of " ~ relation ~
      " in place; run the model with --full-refresh to rebuild it") }}
{%- endmacro %}

{% macro changelake__alter_relation_add_remove_columns(relation, add_columns, remove_columns) %}
  {% for column in add_columns or [] %}
    {% call statement('add_column') -%}
      alter table {{ relation }} add column {{ adapter.quote(column.name) }} {{ column.data_type }}
    {%- endcall %}
  {% endfor %}
  {% for column in remove_columns or [] %}
    {% call statement('drop_column') -%}
      alter table {{ relation }} drop column {{ adapter.quote(column.name) }}
    {%- endcall %}
  {% endfor %}
{% endmacro %}

{% macro changelake__load_csv_rows(model, agate_table) %}
  {#- changelake binds no parameters: each batch is one INSERT of literal rows, cast to the
      seed's column types -#}
  {% set batch_size = get_batch_size() %}
  {% set column_override = model['config'].get('column_types', {}) %}
  {% set casts = [] %}
  {% for col_name in agate_table.column_names %}
    {% set inferred_type = adapter.convert_type(agate_table, loop.index0) %}
    {% set type = column_override.get(col_name, inferred_type) %}
    {% do casts.append("cast(c" ~ loop.index ~ " as " ~ type ~ ") as " ~ adapter.quote_seed_column(col_name, model['config'].get('quote_columns'))) %}
  {% endfor %}
  {% set aliases = [] %}
  {% for col_name in agate_table.column_names %}{% do aliases.append("c" ~ loop.index) %}{% endfor %}
  {% set statements = [] %}
  {% for chunk in agate_table.rows | batch(batch_size) %}
    {% set sql %}
      insert into {{ this.render() }}
      select {{ casts | join(', ') }}
      from values {{ adapter.seed_values(chunk) }} as v({{ aliases | join(', ') }})
    {% endset %}
    {% do adapter.add_query(sql, abridge_sql_log=True) %}
    {% if loop.index0 == 0 %}{% do statements.append(sql) %}{% endif %}
  {% endfor %}
  {{ return(statements[0] if statements else '') }}
{% endmacro %}

{% macro changelake__snapshot_hash_arguments(args) -%}
  md5(concat_ws('|', {%- for arg in args -%}
    coalesce(cast({{ arg }} as string), '')
    {%- if not loop.last %}, {% endif -%}
  {%- endfor -%}))
{%- endmacro %}

{% macro changelake__snapshot_string_as_time(timestamp) -%}
  {{ return("cast('" ~ timestamp ~ "' as timestamp)") }}
{%- endmacro %}

{% macro changelake__snapshot_get_time() -%}
  current_timestamp()
{%- endmacro %}

{% macro changelake__post_snapshot(staging_relation) %}
  {% do adapter.drop_relation(staging_relation) %}
{% endmacro %}

{% macro changelake__snapshot_merge_sql(target, source, insert_cols) -%}
  {%- set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() -%}
  merge into {{ target }} as DBT_INTERNAL_DEST
  using {{ source }} as DBT_INTERNAL_SOURCE
  on DBT_INTERNAL_SOURCE.{{ columns.dbt_scd_id }} = DBT_INTERNAL_DEST.{{ columns.dbt_scd_id }}
  when matched
    {% if config.get("dbt_valid_to_current") %}
     and (DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} = {{ config.get('dbt_valid_to_current') }}
          or DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} is null)
    {% else %}
     and DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} is null
    {% endif %}
     and DBT_INTERNAL_SOURCE.dbt_change_type in ('update', 'delete')
    then update set {{ columns.dbt_valid_to }} = DBT_INTERNAL_SOURCE.{{ columns.dbt_valid_to }}
  when not matched
     and DBT_INTERNAL_SOURCE.dbt_change_type = 'insert'
    then insert ({{ insert_cols | join(', ') }})
    values ({% for c in insert_cols %}DBT_INTERNAL_SOURCE.{{ c }}{% if not loop.last %}, {% endif %}{% endfor %})
{%- endmacro %}

{% macro changelake__dateadd(datepart, interval, from_date_or_timestamp) -%}
  timestampadd({{ datepart }}, {{ interval }}, {{ from_date_or_timestamp }})
{%- endmacro %}

{% macro changelake__datediff(first_date, second_date, datepart) -%}
  timestampdiff({{ datepart }}, {{ first_date }}, {{ second_date }})
{%- endmacro %}

{% macro changelake__type_string() -%} string {%- endmacro %}
{% macro changelake__type_int() -%} int {%- endmacro %}
{% macro changelake__type_bigint() -%} bigint {%- endmacro %}
{% macro changelake__type_float() -%} double {%- endmacro %}
{% macro changelake__type_numeric() -%} decimal(28,6) {%- endmacro %}
{% macro changelake__type_timestamp() -%} timestamp {%- endmacro %}
{% macro changelake__type_boolean() -%} boolean {%- endmacro %}
