"""Presentation: graph pictures, text and HTML tables, plots, reports and Model Explorer files.

Functions of records and graphs; they never decide or compute numbers."""
