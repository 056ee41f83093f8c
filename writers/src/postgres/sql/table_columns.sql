-- The columns of a table with their types, each key column's position in its primary key,
-- whether it is NOT NULL (identity and generated columns aside, which fill themselves), and
-- whether an insert must then give it a value (no default).
SELECT a.attname::text AS name,
       format_type(a.atttypid, a.atttypmod) AS type,
       array_position(i.indkey::int2[], a.attnum) AS pk_position,
       a.attnotnull AND a.attidentity = '' AND a.attgenerated = '' AS not_null,
       a.attnotnull AND a.attidentity = '' AND a.attgenerated = '' AND NOT a.atthasdef
           AS needs_value
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE n.nspname = $1
  AND c.relname = $2
  AND c.relkind IN ('r', 'p')
  AND a.attnum > 0
  AND NOT a.attisdropped
ORDER BY a.attnum
