{# A view model: CREATE OR REPLACE VIEW, one commit (views and dynamic tables on it stay). #}

{% materialization view, adapter='changelake' %}
  {%- set existing = load_cached_relation(this) -%}
  {%- set target = this.incorporate(type='view') -%}
  {{ run_hooks(pre_hooks) }}
  {%- if existing is not none and not existing.is_view -%}
    {{ drop_relation_if_exists(existing) }}
  {%- endif -%}
  {% call statement('main') -%}
    {{ get_create_view_as_sql(target, sql) }}
  {%- endcall %}
  {% do persist_docs(target, model) %}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
