-- The enums named $1 (Debezium sends the name upper case, without its schema) holding every
-- label in $2, as format_type spells them.
SELECT t.oid::regtype::text
FROM pg_type t
WHERE t.typtype = 'e'
  AND upper(t.typname) = $1
  AND NOT EXISTS (
      SELECT 1 FROM unnest($2::text[]) AS l(label)
      WHERE l.label NOT IN (SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid)
  )
