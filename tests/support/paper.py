"""The paper's running example (listings 6-8): people, items and the owner_and_items view."""

from __future__ import annotations

# Listing 8: the DEFAULT changes of owner_and_items over the statements of ``listing_8_changes``
# (name, item, METADATA$ACTION, METADATA$ISUPDATE).
LISTING_8 = [
    ("Donny", "Ball", "DELETE", False),
    ("Donny", "Surfboard", "DELETE", False),
    ("Jeffrey", "Car", "DELETE", True),
    ("Jeffrey", "Ford", "INSERT", True),
    ("Jeffrey", "Rug", "DELETE", False),
    ("Maude", "Rug", "INSERT", False),
]


def listing_6(session) -> None:
    """People and items of listing 6, and the view of listing 7."""
    session.sql("CREATE TABLE people (id INT, name STRING)")
    session.sql(
        "INSERT INTO people VALUES (1, 'Jeffrey'), (2, 'Donny'), (3, 'Walter'), (4, 'Maude')"
    )
    session.sql("CREATE TABLE items (id INT, oid INT, item STRING, `desc` STRING)")
    session.sql(
        "INSERT INTO items VALUES (11, 2, 'Ball', 'Bowling'), (12, 2, 'Surfboard', 'Yater'),"
        " (13, 1, 'Car', '1973'), (14, 1, 'Rug', 'Classic'), (15, 4, 'Autobahn LP', NULL)"
    )
    session.sql(
        "CREATE VIEW owner_and_items AS SELECT name, item FROM people JOIN items ON people.id = oid"
    )


def listing_8_changes(session) -> None:
    """The statements whose changes listing 8 shows."""
    session.sql("UPDATE items SET item = 'Ford' WHERE id = 13")
    session.sql("UPDATE items SET oid = 4 WHERE id = 14")
    session.sql("UPDATE items SET `desc` = 'Techno' WHERE id = 15")
    session.sql("DELETE FROM people WHERE id = 2")
