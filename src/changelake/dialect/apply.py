"""APPLY CHANGES in the changelake dialect (a parser mixin of ``Changelake``): ``APPLY CHANGES
INTO target FROM source KEYS (k, ...) SEQUENCE BY col [options]``; the work is in
``changelake.changelog``."""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from changelake.dialect.syntax import Syntax
from changelake.errors import InvalidStatementError


class ApplyChangesSyntax(Syntax):
    """``APPLY CHANGES INTO target FROM source KEYS (k, ...) SEQUENCE BY col [OP COLUMN op FORMAT
    f] [APPLY AS DELETE WHEN cond] [IGNORE NULL UPDATES] [COLUMNS (c, ...) | COLUMNS * EXCEPT
    (c, ...)] [STORED AS SCD TYPE 1 | 2]``; ``keys``, ``columns``, ``except_columns`` are tuples
    of identifiers, ``sequence`` and ``op_column`` columns (dotted paths allowed)."""

    arg_types = {
        "this": True,
        "source": True,
        "keys": True,
        "sequence": True,
        "op_column": False,
        "op_format": False,
        "delete_when": False,
        "ignore_null_updates": False,
        "columns": False,
        "except_columns": False,
        "scd_type": False,
    }


class ApplyChangesParser:
    """Parse methods for APPLY CHANGES; mixed into the dialect's parser."""

    _curr: Any

    def _parse_apply_changes(self) -> exp.Expression:
        self._advance(2)
        if not self._match(TokenType.INTO):
            self.raise_error("Expected APPLY CHANGES INTO <table> FROM <source>")
        node = ApplyChangesSyntax(this=self._object_name("table"))
        if not self._match(TokenType.FROM):
            self.raise_error("Expected FROM <table, view, stream or (query)> after INTO")
        node.set("source", self._apply_source())
        if not self._match_text_seq("KEYS"):
            self.raise_error("Expected KEYS (k1, ...) after the source of APPLY CHANGES")
        node.set("keys", exp.Tuple(expressions=self._parse_wrapped_csv(self._parse_id_var)))
        if not self._match_text_seq("SEQUENCE", "BY"):
            self.raise_error("Expected SEQUENCE BY <column> after KEYS (...)")
        node.set("sequence", self._parse_column())
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            self._apply_option(node)
        return self.expression(node)

    def _apply_source(self) -> exp.Expression:
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            query = self._parse_wrapped(lambda: self._parse_set_operations(self._parse_select()))
            return exp.Subquery(this=query)
        table = self._parse_table_parts()
        changes = self._parse_changes()
        if changes is not None:
            table.set("changes", changes)
        when = self._parse_historical_data()
        if when is not None:
            table.set("when", when)
        return table

    def _apply_option(self, node: ApplyChangesSyntax) -> None:
        def once(key: str, value: object) -> None:
            if node.args.get(key) is not None:
                raise InvalidStatementError(
                    f"APPLY CHANGES INTO {node.this.name}: {key.upper()} is given twice."
                )
            node.set(key, value)

        if self._match_text_seq("OP", "COLUMN"):
            once("op_column", self._parse_column())
            if not self._match(TokenType.FORMAT):
                self.raise_error("Expected OP COLUMN <column> FORMAT ODF|FLINK|DEBEZIUM|SNOWFLAKE")
            once("op_format", self._parse_var(any_token=True))
        elif self._match_text_seq("APPLY", "AS", "DELETE", "WHEN"):
            once("delete_when", self._parse_disjunction())
        elif self._match_text_seq("IGNORE", "NULL", "UPDATES"):
            once("ignore_null_updates", True)
        elif self._match_text_seq("COLUMNS", "*", "EXCEPT"):
            once(
                "except_columns",
                exp.Tuple(expressions=self._parse_wrapped_csv(self._parse_id_var)),
            )
        elif self._match_text_seq("COLUMNS"):
            once("columns", exp.Tuple(expressions=self._parse_wrapped_csv(self._parse_id_var)))
        elif self._match_text_seq("STORED", "AS", "SCD", "TYPE"):
            if not self._curr or self._curr.text not in ("1", "2"):
                self.raise_error("Expected STORED AS SCD TYPE 1 or SCD TYPE 2")
            once("scd_type", int(self._curr.text))
            self._advance()
        else:
            raise InvalidStatementError(
                f"Unexpected text in APPLY CHANGES INTO {node.this.name}: {self._curr.text!r}."
                " After SEQUENCE BY come, in any order: OP COLUMN op FORMAT ODF|FLINK|DEBEZIUM|"
                "SNOWFLAKE, APPLY AS DELETE WHEN cond, IGNORE NULL UPDATES, COLUMNS (c, ...) or"
                " COLUMNS * EXCEPT (c, ...), STORED AS SCD TYPE 1|2."
            )
