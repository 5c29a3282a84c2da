{# A dynamic table, configured as dbt-snowflake names it: target_lag, refresh_mode (AUTO, FULL,
   INCREMENTAL), initialize (ON_CREATE, ON_SCHEDULE), on_configuration_change (apply, continue,
   fail). The first run creates it; a later run leaves an unchanged one as it is (the scheduler of
   `changelake serve` keeps it within its lag; no refresh is forced), applies a changed lag or
   refresh mode with ALTER, and replaces it when its query or initialize changed. #}

{% macro changelake__dynamic_table_options() -%}
  {%- set lag = config.get('target_lag') -%}
  target_lag = {{ "downstream" if lag | lower == "downstream" else "'" ~ lag ~ "'" }}
  refresh_mode = {{ config.get('refresh_mode') or 'AUTO' }}
  initialize = {{ config.get('initialize') or 'ON_CREATE' }}
{%- endmacro %}

{% macro changelake__create_dynamic_table(relation, sql, replace=False) -%}
  create {{ 'or replace ' if replace }}dynamic table {{ relation }}
  {{ changelake__dynamic_table_options() }}
  as {{ sql }}
{%- endmacro %}

{% materialization dynamic_table, adapter='changelake' %}
  {%- set existing = load_cached_relation(this) -%}
  {%- set target = this.incorporate(type='dynamic_table') -%}
  {%- set on_change = (config.get('on_configuration_change') or 'apply') | lower -%}
  {%- if on_change not in ('apply', 'continue', 'fail') -%}
    {{ exceptions.raise_compiler_error("on_configuration_change of " ~ this ~ " is " ~ on_change ~ "; give apply, continue or fail") }}
  {%- endif -%}
  {%- if not config.get('target_lag') -%}
    {{ exceptions.raise_compiler_error("dynamic table " ~ this ~ " needs target_lag, such as target_lag='5 minutes' or 'downstream'") }}
  {%- endif -%}
  {{ run_hooks(pre_hooks) }}
  {%- if existing is not none and not existing.is_dynamic_table -%}
    {{ drop_relation_if_exists(existing) }}
    {%- set existing = none -%}
  {%- endif -%}
  {%- set build_sql = none -%}
  {%- if existing is none -%}
    {%- set build_sql = changelake__create_dynamic_table(target, sql) -%}
  {%- elif should_full_refresh() -%}
    {%- set build_sql = changelake__create_dynamic_table(target, sql, replace=True) -%}
  {%- else -%}
    {%- set changes = adapter.dynamic_table_changes(target, sql, config.get('target_lag'), config.get('refresh_mode') or 'AUTO') -%}
    {%- set query_changed = changes['query'] -%}
    {%- set settings = changes['settings'] -%}
    {%- if query_changed or settings -%}
      {%- if on_change == 'fail' -%}
        {{ exceptions.raise_compiler_error("dynamic table " ~ this ~ " changed (" ~ ("its query" if query_changed else settings | join(', ')) ~ ") and on_configuration_change is fail; run with --full-refresh or set it to apply") }}
      {%- elif on_change == 'continue' -%}
        {% do exceptions.warn("dynamic table " ~ this ~ " differs from its model (" ~ ("its query" if query_changed else settings | join(', ')) ~ "); on_configuration_change is continue, so it stays as it is") %}
      {%- elif query_changed -%}
        {%- set build_sql = changelake__create_dynamic_table(target, sql, replace=True) -%}
      {%- else -%}
        {%- set build_sql = "alter dynamic table " ~ target ~ " set " ~ settings | join(', ') -%}
      {%- endif -%}
    {%- endif -%}
  {%- endif -%}
  {% call statement('main') -%}
    {{ build_sql if build_sql is not none else 'describe dynamic table ' ~ target }}
  {%- endcall %}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
