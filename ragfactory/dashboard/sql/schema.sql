-- Every relation of the warehouse with its columns (the SQL page's sidebar): $tables names the
-- warehouse's own tables (schemas/tables.py); the others are the views shipped in warehouse/sql.
select
    c.table_name,
    list_contains($tables, c.table_name) as is_table,
    c.column_name,
    c.data_type
from information_schema.columns c
where c.table_schema = 'main'
order by is_table desc, c.table_name, c.ordinal_position
