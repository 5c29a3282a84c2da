{# A table model. A table that exists gets the query's rows as one new version of the same table
   (INSERT OVERWRITE): readers see the old rows or the new, never a mix, views on it keep working,
   and time travel (AT (VERSION => n)) still reads what it held before. Only a change of columns
   replaces the table. #}

{% macro changelake__replace_table(existing, target, sql) %}
  {%- set old = adapter.get_columns_in_relation(existing) | map(attribute='dtype') | list -%}
  {%- set old_names = adapter.get_columns_in_relation(existing) | map(attribute='name') | map('lower') | list -%}
  {%- set new = adapter.query_columns(sql) -%}
  {%- if old_names == (new | map(attribute='name') | map('lower') | list) and old == (new | map(attribute='dtype') | list) -%}
    insert overwrite {{ target }} select * from ({{ sql }}) as dbt_model
  {%- else -%}
    create or replace table {{ target }} as {{ sql }}
  {%- endif -%}
{% endmacro %}

{% materialization table, adapter='changelake' %}
  {%- set existing = load_cached_relation(this) -%}
  {%- set target = this.incorporate(type='table') -%}
  {{ run_hooks(pre_hooks) }}
  {%- if existing is not none and existing.type != 'table' -%}
    {{ drop_relation_if_exists(existing) }}
    {%- set existing = none -%}
  {%- endif -%}
  {% call statement('main') -%}
    {%- if existing is none -%}
      {{ create_table_as(False, target, sql) }}
    {%- else -%}
      {{ changelake__replace_table(existing, target, sql) }}
    {%- endif -%}
  {%- endcall %}
  {% do persist_docs(target, model) %}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
