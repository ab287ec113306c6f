"""Other tools' formats, read into and written from a Bundle (see bundle.py); no storage here."""
