"""Warehouse root, atomic Parquet writes and the DuckDB catalog."""

from ragfactory.warehouse.catalog import confined_connection, query, refresh_catalog, user_query
from ragfactory.warehouse.store import Warehouse, default_root

__all__ = ["Warehouse", "confined_connection", "default_root", "query", "refresh_catalog", "user_query"]
