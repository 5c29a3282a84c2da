{# An incremental model: the first run (and --full-refresh) builds the table as a table model
   does; later runs apply the model's rows with the strategy (through a staging table only when
   on_schema_change must compare columns):
   append (INSERT), merge (MERGE on unique_key), delete+insert (one transaction: both commit
   together or neither), microbatch (each batch replaces its event-time window, atomically). #}

{% materialization incremental, adapter='changelake' %}
  {%- set existing = load_cached_relation(this) -%}
  {%- set target = this.incorporate(type='table') -%}
  {%- set unique_key = config.get('unique_key') -%}
  {%- set on_schema_change = incremental_validate_on_schema_change(config.get('on_schema_change'), default='ignore') -%}
  {{ run_hooks(pre_hooks) }}
  {%- if existing is not none and existing.type != 'table' -%}
    {{ drop_relation_if_exists(existing) }}
    {%- set existing = none -%}
  {%- endif -%}
  {%- if existing is none -%}
    {%- set build_sql = create_table_as(False, target, sql) -%}
  {%- elif should_full_refresh() -%}
    {%- set build_sql = changelake__replace_table(existing, target, sql) -%}
  {%- elif on_schema_change == 'ignore' -%}
    {#- the strategy reads the model's query itself: one statement (or one transaction) reads
        it and writes, so a STREAM the model reads is consumed in the commit of the write -#}
    {%- set model_rows = '(' ~ sql ~ ')' -%}
    {%- set dest_columns = adapter.get_columns_in_relation(existing) -%}
  {%- else -%}
    {#- on_schema_change compares the model's columns with the table's: a staging table has them -#}
    {%- set staging = make_temp_relation(target) -%}
    {{ drop_relation_if_exists(staging) }}
    {% do run_query(create_table_as(True, staging, sql)) %}
    {%- set model_rows = staging -%}
    {%- set dest_columns = process_schema_changes(on_schema_change, staging, existing) -%}
    {%- if not dest_columns -%}
      {%- set dest_columns = adapter.get_columns_in_relation(existing) -%}
    {%- endif -%}
  {%- endif -%}
  {%- if model_rows is defined -%}
    {%- set strategy = config.get('incremental_strategy') or 'default' -%}
    {%- set strategy_macro = adapter.get_incremental_strategy_macro(context, strategy) -%}
    {%- set predicates = config.get('predicates', none) or config.get('incremental_predicates', none) -%}
    {%- set build_sql = strategy_macro({'target_relation': target, 'temp_relation': model_rows, 'unique_key': unique_key, 'dest_columns': dest_columns, 'incremental_predicates': predicates}) -%}
  {%- endif -%}
  {% call statement('main') -%}
    {{ build_sql }}
  {%- endcall %}
  {%- if staging is defined -%}
    {% do adapter.drop_relation(staging) %}
  {%- endif -%}
  {% do persist_docs(target, model) %}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}

{% macro changelake__get_incremental_default_sql(arg_dict) %}
  {%- if arg_dict['unique_key'] -%}
    {{ return(get_incremental_merge_sql(arg_dict)) }}
  {%- else -%}
    {{ return(get_incremental_append_sql(arg_dict)) }}
  {%- endif -%}
{% endmacro %}

{% macro changelake__get_insert_into_sql(target, source, dest_columns) -%}
  {%- set columns = get_quoted_csv(dest_columns | map(attribute='name')) -%}
  insert into {{ target }} ({{ columns }}) select {{ columns }} from {{ source }}
{%- endmacro %}

{% macro changelake__get_incremental_append_sql(arg_dict) %}
  {{ return(changelake__get_insert_into_sql(arg_dict['target_relation'], arg_dict['temp_relation'], arg_dict['dest_columns'])) }}
{% endmacro %}

{% macro changelake__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates=none) -%}
  {%- set predicates = [] if incremental_predicates is none else [] + incremental_predicates -%}
  {%- set columns = dest_columns | map(attribute='name') | list -%}
  {%- set update_columns = get_merge_update_columns(config.get('merge_update_columns'), config.get('merge_exclude_columns'), dest_columns) -%}
  {%- if unique_key -%}
    {%- set keys = [unique_key] if unique_key is string else unique_key -%}
    {%- for key in keys -%}
      {%- do predicates.append('DBT_INTERNAL_SOURCE.' ~ key ~ ' = DBT_INTERNAL_DEST.' ~ key) -%}
    {%- endfor -%}
  {%- else -%}
    {%- do predicates.append('FALSE') -%}
  {%- endif -%}
  merge into {{ target }} as DBT_INTERNAL_DEST
  using {{ source }} as DBT_INTERNAL_SOURCE
  on ({{ predicates | join(') and (') }})
  {%- if unique_key and update_columns %}
  when matched then update set
    {%- for column in update_columns %} {{ column }} = DBT_INTERNAL_SOURCE.{{ column }}{{ ',' if not loop.last }}{% endfor %}
  {%- endif %}
  when not matched then insert ({{ get_quoted_csv(columns) }})
  values ({% for column in columns %}DBT_INTERNAL_SOURCE.{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
{%- endmacro %}

{% macro changelake__get_delete_insert_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) -%}
  {%- if not unique_key -%}
    {{ changelake__get_insert_into_sql(target, source, dest_columns) }}
  {%- else -%}
    {%- set keys = [unique_key] if unique_key is string else unique_key -%}
    begin;
    delete from {{ target }} as DBT_INTERNAL_DEST
    where ({{ keys | join(', ') }}) in (select distinct {{ keys | join(', ') }} from {{ source }})
    {%- for predicate in incremental_predicates or [] %} and {{ predicate }}{% endfor %};
    {{ changelake__get_insert_into_sql(target, source, dest_columns) }};
    commit
  {%- endif -%}
{%- endmacro %}

{% macro changelake__get_incremental_microbatch_sql(arg_dict) %}
  {#- Each batch replaces the rows of its event-time window: delete the window, insert the batch,
      in one transaction -#}
  {%- set target = arg_dict['target_relation'] -%}
  {%- set event_time = model.config.event_time -%}
  {%- set start = model.batch.event_time_start if model.batch else model.config.get('__dbt_internal_microbatch_event_time_start') -%}
  {%- set end = model.batch.event_time_end if model.batch else model.config.get('__dbt_internal_microbatch_event_time_end') -%}
  {%- set where = [] -%}
  {%- if start %}{% do where.append(event_time ~ " >= cast('" ~ start ~ "' as timestamp)") %}{% endif -%}
  {%- if end %}{% do where.append(event_time ~ " < cast('" ~ end ~ "' as timestamp)") %}{% endif -%}
  {%- for predicate in arg_dict['incremental_predicates'] or [] %}{% do where.append(predicate) %}{% endfor -%}
  {%- set sql -%}
    begin;
    delete from {{ target }} as DBT_INTERNAL_DEST
    {%- if where %} where {{ where | join(' and ') }}{% endif %};
    {{ changelake__get_insert_into_sql(target, arg_dict['temp_relation'], arg_dict['dest_columns']) }};
    commit
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
