"""External tables FROM FILES: ``stage`` (the location, listing, file formats) and ``files``
(CREATE and refresh: each new file read and registered once).
"""
